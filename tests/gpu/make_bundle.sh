#!/usr/bin/env bash
# Builds what a GPU session runs and packs it for the `device` tool: devbundle.tar.xz (the
# strata binary, the GPU and engine tests, the e2e suites that run there, model_bench),
# with the shared libraries the GPU machine lacks. Ignored by git; name it in `carry`.
#   bash tests/gpu/make_bundle.sh        then, there: bash tests/gpu/device_session.sh PHASE...
# BUNDLE_TARGETS="strata ..." packs only those (the device tool carries 64 MiB in all,
# the working tree included: phases that need only strata, e.g. hf and ppl, fit easily).
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(strata cuda_dependent_launch_test cuda_kernels_test cuda_prefill_attention_test cuda_model_kernels_test cuda_model_test
  cuda_engine_test engine_test model_test chat_e2e_test chat_session_e2e_test bench_e2e_test model_bench kv_load_bench
  relay_attention_bench relay_step_bench)
if [ -n "${BUNDLE_TARGETS:-}" ]; then read -r -a targets <<<"$BUNDLE_TARGETS"; fi
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/strata-ccache}
cmake --build build -j "$(nproc)" --target "${targets[@]}"
rm -rf devbundle devbundle.tar.xz
progs=()
for t in "${targets[@]}"; do progs+=("$(find build -name "$t" -type f -executable | head -1)"); done
../shared/tools/bundle-for-device devbundle "${progs[@]}"
# The CUPTI kernel tracer (device_session.sh trace) and the CUPTI it needs.
trace_lib=build/tests/bench/libstrata_kernel_trace.so
if cmake --build build --target strata_kernel_trace >/dev/null 2>&1 && [ -f "$trace_lib" ]; then
  cp -L "$trace_lib" devbundle/lib/
  cp -L "$(ldd "$trace_lib" | awk '/libcupti/{print $3}')" devbundle/lib/
fi
strip --strip-debug devbundle/bin/* devbundle/lib/* 2>/dev/null || true
XZ_OPT=${XZ_OPT:--9} tar cJf devbundle.tar.xz devbundle  # -9: the tree and the bundle share 64 MiB
rm -rf devbundle
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for pattern in devbundle.tar.xz devbundle/ device-out/; do
  grep -qx "$pattern" "$exclude" 2>/dev/null || echo "$pattern" >>"$exclude"
done
ls -la devbundle.tar.xz
