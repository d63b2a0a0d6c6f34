#!/usr/bin/env bash
# fetch.sh DIR: npm-installs the reference tokenizers (package.json beside this script)
# into DIR (in the build tree). Exit 0 when they are there, 77 (ctest: skipped) when npm
# is missing or the registry cannot be reached; the tests that need them then skip.
set -uo pipefail
# One install at a time: the test cases of a suite run as parallel processes.
exec 9>"$1.lock"
flock 9
dir=$1
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
if cmp -s "$src/package.json" "$dir/package.json" && [ -f "$dir/node_modules/.strata-complete" ]; then
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIP: node/npm not installed: the reference tokenizer comparison does not run" >&2
  exit 77
fi
cp "$src/package.json" "$dir/package.json"
cd "$dir"
rm -f node_modules/.strata-complete
if ! timeout 600 npm install --no-audit --no-fund --ignore-scripts --loglevel=error >npm-install.log 2>&1; then
  echo "SKIP: npm install failed (registry unreachable?): see $dir/npm-install.log" >&2
  tail -5 npm-install.log >&2
  exit 77
fi
touch node_modules/.strata-complete
echo "reference tokenizers installed in $dir"
