#!/usr/bin/env bash
# Installs the Kubernetes schema validator (npm: kubernetes-models, yaml) into $2 once and
# validates deploy/k8s ($1) with it. Says SKIP (exit 0) where npm or the registry is not
# there.
set -uo pipefail
manifests=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are needed to fetch the Kubernetes schemas (kubernetes-models)"; exit 0
fi
if [ ! -d "$work/node_modules/kubernetes-models" ] || [ ! -d "$work/node_modules/yaml" ]; then
  mkdir -p "$work"
  if ! (cd "$work" && npm install --silent --no-audit --no-fund --prefix "$work" kubernetes-models@5.1.0 yaml@2 >npm.log 2>&1); then
    echo "SKIP: npm could not install kubernetes-models (no registry?):"; tail -5 "$work/npm.log"; exit 0
  fi
fi
exec node "$here/validate_manifests.mjs" "$manifests" "$work/node_modules"
