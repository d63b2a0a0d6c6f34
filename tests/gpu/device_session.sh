#!/usr/bin/env bash
# What one lease of the GPU machine runs (the `device` tool, from the repository root, with
# devbundle.tar.xz from tests/gpu/make_bundle.sh carried). Phases, in the order given:
#   tests     the GPU unit tests (kernels, CUDA backend, engine on CUDA) and engine/model
#             tests, and the chat and bench e2e suites with `strata serve` on the GPU
#   hf        tests/gpu/check_hf_logits.py, CPU and CUDA backends against HF transformers
#   sanitize  compute-sanitizer racecheck and synccheck over the CUDA backend's tests
#             (env SAN_TOOLS, SAN_TESTS, SAN_FILTER, SAN_TIMEOUT narrow it)
#   bench-host  strata bench on random:llama3-8b: TTFT cached (history on host, HBM tier
#             off) vs recomputed by history, and at 32 and 64 concurrent sessions
#   bench-hbm the same with the HBM tier on (the history still resident in the KV pool)
#   bench-host-history, bench-hbm-history  the one-session history sweeps alone
#   bench-host-settled  the host history sweep with turn 2 sent 500 ms after turn 1 (its
#             write-back landed: the history is settled on host)
#   bench-host-concurrent  bench-host's 32 and 64 sessions at once alone (CONC_HISTORY)
#   bench-hbm-settled  the HBM history sweep with turn 2 sent 500 ms after turn 1 (resident
#             in HBM, no write-back beside it)
#   bench-hbm-stream  the same at 1K and 16K over ChatSession (--chat_stream), the server with
#             --cpu_idle_poll_threads=-1 and without, three times each, alternating; then
#             model_bench's compute of the turn's new tokens
#   relay-sweep  relay_attention_bench --sweep: the fused launch's balances at batch >= 32
#   diag-host the 16K host-tier turn alone (5 repeats, no cache-off server) settled (500 ms
#             after turn 1) and at once, and from HBM: where its TTFT goes (queue, prefill,
#             the loads' device time and the steps' stalls, from /metrics)
#   diag-copy the same settled 16K host turn by the loader's DMA size
#   nosplit   both history sweeps with the prefill's split along the keys off (no cache-off
#             server: compare with the sweeps above)
#   step-e2e  the decode step seen end to end (64 sessions x 1K, 128 tokens)
#   hf-old    check_hf_logits with devbundle-old (an older strata, for comparison)
#   sharegpt  strata bench's ShareGPT-shaped workload at two rates, cache on vs off
#   step      model_bench's decode step for llama3-8b (the peer of the end-to-end step)
#   kvload    kv_load_bench: layer-wise LoadKv and SaveKv of a 16K-token session vs
#             cudaMemcpyAsync of the same bytes, then writeback
#   writeback kv_load_bench --writeback: a decode batch's steps with and without a 16K
#             save in flight on the write stream
#   gputests  only the GPU unit tests (kernels, CUDA backend, engine on CUDA)
#   gemm      gemm_bench: cuBLAS vs the skinny kernel on Llama-3-8B, Qwen3-8B and Qwen2.5-7B
#             layer shapes, L2 flushed, against the copy rate
#   step-compare  model_bench --decode_only --compare_skinny: each decode step with the
#             skinny products and with cuBLAS, beside each other (MODELS)
#   pair      decode steps of each of PAIR_MODELS (default qwen2.5-7b qwen3-8b) and llama3-8b on
#             the GPU at once, timed in alternating rounds (model_bench --pair): issue #21's ratio
#   step-kernels  one decode step's kernels under ncu, summed by name (tests/gpu/step_kernels.py;
#             MODELS, STEP_SHAPES: e.g. "64,1024 32,1024")
#   prompts   shared system prompts: 64 sessions, S = 0/2048/4096 system tokens shared and
#             read by relay attention, shared pages read per session, and not shared: TTFT,
#             decode rate, host bytes (PROMPT_S, PROMPT_MODES)
#   prompts-many  64 sessions over 3 shared 4K system prompts, ~640 own tokens each (a
#             decode batch holds 32K+ of the rows' own tokens), two turns, against a
#             cache-off server: answers compared (PROMPTS_MANY_MAX_DIFFER, default 40 of the
#             120 turns allowed to differ: random weights' bf16 near-ties, 14-34 seen with
#             relay and 26 with relay off in the same lease, docs/BENCHMARKS.md; a garbled
#             cache differs in most, from the first token);
#             PROMPTS_MANY_MODES: relay (default),
#             beside (relay's system part on the second stream), chained (the decode
#             a programmatic dependent of the system part), pages (relay off), none
#             (not shared)
#   ppl       strata ppl of the built-in model on its held-out text: the whole file on the
#             GPU, and its first 20 KB on the GPU and on the CPU (the two must agree); then
#             truncation on stored KV vs recompute vs no re-rotation (trained and random)
#   relay     relay attention's GPU tests, relay_attention_bench, PyTorch on the same shapes
#             (then `sanitize` with SAN_TESTS=cuda_prefill_attention_test and a SAN_FILTER
#             puts the relay and wgmma kernels under compute-sanitizer)
#   relay-step  relay's forms inside whole decode steps, graphs and eager (relay_step_bench;
#             RELAY_STEP_SHAPES, default "64,4096,1024"; RELAY_STEP_CHUNK: mixed steps)
#   trace     the prompts A/B of relay and chained (TRACE_MODES) with the server's kernels
#             traced (CUPTI, tests/bench/kernel_trace.cc) and summed side by side
#   uneven    decode rows of unequal length split by their mean (Step::typical_tokens): the
#             kernel and model tests, relay_step_bench --long=5120 (one long row beside 64 of
#             1K) and --exponential (own tokens drawn as strata bench draws them), and the
#             prompts A/B of relay and chained with the split on and off (the bench draws the
#             sessions' own tokens exponentially: their lengths differ)
#   relay-figure  issue 15's kernel figure in one call: the relay tests, relay_attention_bench
#             at its shapes (64 and 32 rows x 1K/4K/8K x 1K), relay-step, and the prompts A/B
#             of relay and chained (4K prompt, 1K own tokens)
#   batch     batch_bench on random:llama3-8b: token saving of the plans, then one batch as
#             Chat calls, first-level prefix reuse and the global plan (BATCH_ARGS adds flags)
#   rate      the sustainable session rate with a 4K system prompt (p99 TTFT <= 1 s): relay,
#             shared pages, not shared (RATE_MODES, RATE_START, RATE_PROBES, RATE_TIMEOUT)
#   bench-ssd strata bench --sweep_from_ssd at 4K and 16K: turn 2 with its history only on
#             the machine's disk (server restarted, no hint) vs recomputed; then the same
#             with fetch-or-recompute off (every SSD hit loaded), for the load's own TTFT
#             (env SSD_MODES, SSD_HISTORY, SSD_TIMEOUT; a watchdog saves the servers'
#             stacks before the timeout, and their logs are copied to $OUT)
# Logs and JSON go to $OUT (or ./device-out); a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
[ -d devbundle ] || tar xJf devbundle.tar.xz
export LD_LIBRARY_PATH="$PWD/devbundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
B=$PWD/devbundle/bin
# The e2e tests start the server at the path the build gave them.
for p in "$PWD/build/strata" /work/main/build/strata; do
  mkdir -p "$(dirname "$p")" && cp -f "$B/strata" "$p" 2>/dev/null || true
done
# Tests that read the source tree (the built-in model's directory) find it where it was built.
if [ "$PWD" != /work/main ]; then mkdir -p /work/main/model && cp -rf model/builtin /work/main/model/ 2>/dev/null || true; fi
summary=$OUT/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$summary"

run_tests() {
  for t in cuda_dependent_launch_test cuda_kernels_test cuda_prefill_attention_test cuda_model_kernels_test cuda_model_test cuda_engine_test \
           engine_test model_test chat_e2e_test chat_session_e2e_test bench_e2e_test; do
    timeout 900 "$B/$t" --gtest_brief=1 >"$OUT/test-$t.log" 2>&1
    note "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/test-$t.log" | tr '\n' ' ')"
  done
}

run_hf() {
  python3 tests/gpu/check_hf_logits.py strata --run devbundle/run >"$OUT/hf-cpu.log" 2>&1
  note "check_hf_logits cpu: rc=$?"; tail -8 "$OUT/hf-cpu.log" >>"$summary"
  python3 tests/gpu/check_hf_logits.py strata --run devbundle/run --device cuda >"$OUT/hf-cuda.log" 2>&1
  note "check_hf_logits cuda: rc=$?"; tail -8 "$OUT/hf-cuda.log" >>"$summary"
}

run_hf_old() {
  [ -d devbundle-old ] || tar xJf devbundle-old.tar.xz
  python3 tests/gpu/check_hf_logits.py strata --run devbundle-old/run --device cuda >"$OUT/hf-cuda-old.log" 2>&1
  note "check_hf_logits cuda (old build): rc=$?"; tail -8 "$OUT/hf-cuda-old.log" >>"$summary"
}

run_sanitize() {
  local cs=/usr/local/cuda/bin/compute-sanitizer
  for tool in ${SAN_TOOLS:-racecheck synccheck}; do
    for t in ${SAN_TESTS:-cuda_model_test cuda_engine_test}; do
      timeout "${SAN_TIMEOUT:-600}" "$cs" --tool "$tool" --error-exitcode 9 "$B/$t" --gtest_brief=1 \
        ${SAN_FILTER:+--gtest_filter=$SAN_FILTER} >"$OUT/san-$tool-$t.log" 2>&1
      note "compute-sanitizer $tool $t: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san-$tool-$t.log" | tr '\n' ' ')"
    done
  done
}

SERVE8B="--model=random:llama3-8b --device=cuda"
# bench TAG EXTRA_SERVE_FLAGS: the TTFT sweeps (history on host with --hbm_cache_bytes=0,
# resident in HBM by default) and the decode step seen end to end.
run_ppl() {
  head -c 20000 model/builtin/held_out.txt >"$OUT/held_out_20k.txt"
  for run in "cuda model/builtin/held_out.txt full" "cuda $OUT/held_out_20k.txt 20k" "cpu $OUT/held_out_20k.txt 20k"; do
    set -- $run
    "$B/strata" ppl --device="$1" --text="$2" >"$OUT/ppl-$1-$3.log" 2>&1
    note "ppl $1 $3: rc=$? $(grep -E '^(perplexity|bits/byte|time)' "$OUT/ppl-$1-$3.log" | tr -s ' ' | tr '\n' ';')"
  done
  rm -f "$OUT/held_out_20k.txt"
  # Truncation on stored KV (issue 19): re-rotated (strata) vs recomputed vs not re-rotated.
  for model in "" random:builtin; do
    "$B/strata" ppl --device=cuda --model="$model" --text=model/builtin/held_out.txt --truncation_window=1024 \
      --batch=32 >"$OUT/ppl-truncation${model:+-random}.log" 2>&1
    note "ppl truncation ${model:-builtin}: rc=$?"; tail -5 "$OUT/ppl-truncation${model:+-random}.log" >>"$summary"
  done
}

run_bench() {
  run_bench_history "$1" "$2"
  run_bench_concurrent "$1" "$2"
}

# Many sessions returning at once (CONC_HISTORY, default 2K and 8K; 32 and 64 sessions).
run_bench_concurrent() {
  local tag=$1 extra=$2
  "$B/strata" bench --sweep --history=${CONC_HISTORY:-2048,8192} --new_tokens=64 --concurrency=32,64 \
    --sweep_answer_tokens=16 --compare=cache_off --serve_flags="$SERVE8B $extra --host_cache_bytes=$((80 << 30))" \
    --json="$OUT/$tag-concurrent.json" >"$OUT/$tag-concurrent.txt" 2>"$OUT/$tag-concurrent.err"
  note "$tag concurrent sweep: rc=$?"; cat "$OUT/$tag-concurrent.txt" >>"$summary"
}

# The history sweep alone (one session at a time); COMPARE= leaves out the cache-off server.
run_bench_history() {
  local tag=$1 extra=$2
  "$B/strata" bench --sweep --history=${HISTORY:-1024,4096,16384,30720} --new_tokens=64 --concurrency=1 \
    --sweep_repeats=${REPEATS:-3} \
    --sweep_answer_tokens=16 ${COMPARE-"--compare=cache_off"} ${SWEEP_GAP:+--sweep_gap_ms=$SWEEP_GAP} ${BENCH_EXTRA:-} --serve_flags="$SERVE8B $extra --host_cache_bytes=$((16 << 30))" \
    --json="$OUT/$tag-history.json" >"$OUT/$tag-history.txt" 2>"$OUT/$tag-history.err"
  note "$tag history sweep: rc=$?"; cat "$OUT/$tag-history.txt" >>"$summary"
}

run_step_e2e() {
  "$B/strata" bench --sweep --history=1024 --new_tokens=64 --concurrency=64 --sweep_output_tokens=128 \
    --serve_flags="$SERVE8B --host_cache_bytes=$((16 << 30))" \
    --json="$OUT/bench-step.json" >"$OUT/bench-step.txt" 2>"$OUT/bench-step.err"
  note "bench decode step (64 x 1K, 128 tokens): rc=$? inter-token p50/p99 ms: $(python3 -c "
import json; r=json.load(open('$OUT/bench-step.json'))['sweep'][0]['runs'][0]['inter_token_ms']; print(round(r['p50'],2), round(r['p99'],2))")"
}

run_sharegpt() {
  for rate in 1 4; do
    "$B/strata" bench --sessions=96 --rate=$rate --turns=4 --prompt_tokens=200 --output_tokens=100 --think_s=2 \
      --max_context_tokens=16384 --compare=cache_off --serve_flags="$SERVE8B --host_cache_bytes=$((32 << 30))" \
      --json="$OUT/bench-sharegpt-$rate.json" >"$OUT/bench-sharegpt-$rate.txt" 2>"$OUT/bench-sharegpt-$rate.err"
    note "bench sharegpt rate $rate: rc=$?"; cat "$OUT/bench-sharegpt-$rate.txt" >>"$summary"
  done
}

run_kvload() {
  "$B/kv_load_bench" >"$OUT/kv_load_bench.txt" 2>&1
  note "kv_load_bench: rc=$?"; cat "$OUT/kv_load_bench.txt" >>"$summary"
  run_writeback
}

run_writeback() {
  "$B/kv_load_bench" --writeback >"$OUT/kv_writeback_bench.txt" 2>&1
  note "kv_load_bench --writeback: rc=$?"; cat "$OUT/kv_writeback_bench.txt" >>"$summary"
}

# run_gpu_tests TEST...: each test binary, its result line and first failures in the summary.
run_gpu_tests() {
  for t in "$@"; do
    timeout 900 "$B/$t" --gtest_brief=1 >"$OUT/test-$t.log" 2>&1
    note "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/test-$t.log" | tr '\n' ' ')"
    grep -E 'Failure|Expected|Which is|differ' "$OUT/test-$t.log" | head -20 >>"$summary"
  done
}

run_bench_ssd() {
  local ssd=$PWD/bench-ssd-dir
  for mode in ${SSD_MODES:-rule load}; do
    local extra="--fetch_or_recompute=true"
    [ $mode = load ] && extra="--fetch_or_recompute=false"
    rm -rf "$ssd" && mkdir -p "$ssd"
    local before; before=$(ls -d /tmp/strata-serve-* 2>/dev/null)
    timeout "${SSD_TIMEOUT:-900}" "$B/strata" bench --sweep --sweep_from_ssd --history="${SSD_HISTORY:-4096,16384}" \
      --new_tokens=64 --concurrency=1 --sweep_answer_tokens=16 --compare=cache_off \
      --serve_flags="$SERVE8B --hbm_cache_bytes=0 --host_cache_bytes=$((4 << 30)) --ssd_dirs=$ssd --ssd_capacity_bytes=$((8 << 30)) $extra" \
      --json="$OUT/bench-ssd-$mode.json" >"$OUT/bench-ssd-$mode.txt" 2>"$OUT/bench-ssd-$mode.err" &
    local bench=$!
    # A watchdog: shortly before the timeout, the servers' threads' stacks go to $OUT.
    ( sleep $(( ${SSD_TIMEOUT:-900} - 15 )); for p in $(pgrep -f "strata serve"); do
        for dbg in gdb /usr/local/cuda/bin/cuda-gdb; do command -v $dbg >/dev/null || continue
          timeout 10 $dbg -p "$p" -batch -ex "thread apply all bt 12" >"$OUT/stacks-$mode-$p.txt" 2>&1 && break; done
      done ) &
    local dog=$!
    wait $bench; local rc=$?
    kill $dog 2>/dev/null
    note "bench-ssd ($mode) sweep: rc=$rc"; cat "$OUT/bench-ssd-$mode.txt" >>"$summary"
    for d in $(ls -d /tmp/strata-serve-* 2>/dev/null); do
      grep -qx "$d" <<<"$before" || cp "$d/serve.log" "$OUT/serve-$mode-$(basename "$d").log" 2>/dev/null
    done
    grep -E "persisted in|cannot|Flush" "$OUT/bench-ssd-$mode.err" | head -6 >>"$summary"
  done
  rm -rf "$ssd"
}

# The issue-15 table: 64 sessions at once, each prompt = the same S system tokens + 128 of
# its own, 128 new tokens; S = 0, 2048, 4096, with the prompt shared and read by relay
# attention (relay; warm: the prompt computed before the run, as a registered prompt is),
# shared pages read by each session (pages: --cuda_relay_attention=false), not shared
# (none), and relay with its system part beside the decode from 32K of the rows' own tokens
# (beside: --cuda_relay_beside_min_tokens=32768), or chained before it on one stream (chained:
# --cuda_relay_chained_min_tokens=32768; the default where the decode is on the tensor cores;
# unchained: never, --cuda_relay_chained_min_tokens=-2); tc, chained-tc, pages-tc: relay, chained, pages
# with every decode on the tensor cores (--cuda_decode_kernel=tensor); cuda: relay with every
# decode on the CUDA cores (--cuda_decode_kernel=cuda). Env PROMPT_S and PROMPT_MODES narrow it; PROMPT_OWN sets the own tokens (128);
# PROMPT_FLAGS adds serve flags to every mode.
# The serve flags of a shared-prompt mode (run_prompts' list above; relay and warm: none).
prompt_mode_flags() {
  case $1 in
    pages) echo "--cuda_relay_attention=false" ;;
    none) echo "--min_shared_prompt_tokens=0" ;;
    beside) echo "--cuda_relay_beside_min_tokens=32768" ;;
    chained) echo "--cuda_relay_chained_min_tokens=32768" ;;
    unchained) echo "--cuda_relay_chained_min_tokens=-2" ;;
    tc) echo "--cuda_decode_kernel=tensor" ;;
    cuda) echo "--cuda_decode_kernel=cuda" ;;
    chained-tc) echo "--cuda_relay_chained_min_tokens=32768 --cuda_decode_kernel=tensor" ;;
    pages-tc) echo "--cuda_relay_attention=false --cuda_decode_kernel=tensor" ;;
  esac
}
run_prompts() {
  for S in ${PROMPT_S:-0 2048 4096}; do
    for mode in ${PROMPT_MODES:-relay warm pages none}; do
      [ "$S" = 0 ] && [ "$mode" != relay ] && continue
      local flags="$SERVE8B --host_cache_bytes=$((64 << 30)) --max_batch=64 ${PROMPT_FLAGS:-}"
      local sys="--system_prompts=1 --system_prompt_tokens=$S"; [ "$S" = 0 ] && sys="--system_prompts=0"
      [ "$mode" = warm ] && sys="$sys --warm_system_prompts"
      flags="$flags $(prompt_mode_flags "$mode")"
      "$B/strata" bench --sessions=64 --rate=1000 --turns=1 --prompt_tokens="${PROMPT_OWN:-128}" --output_tokens=128 \
        --max_output_tokens=128 --max_context_tokens=16384 $sys --serve_flags="$flags" --json="$OUT/bench-prompts-$S-$mode.json" \
        >"$OUT/bench-prompts-$S-$mode.txt" 2>"$OUT/bench-prompts-$S-$mode.err"
      local rc=$?
      note "bench prompts S=$S $mode: rc=$rc"
      [ $rc = 0 ] || tail -5 "$OUT/bench-prompts-$S-$mode.err" >>"$summary"
      grep -E "TTFT \(client\)|inter-token|turns:|host tier|server steps|engine thread" "$OUT/bench-prompts-$S-$mode.txt" >>"$summary"
    done
  done
}

# The sustainable rate with a 4K system prompt: the highest session rate whose p99 TTFT
# meets 1 s (strata bench --find_rate), relay vs shared pages vs not shared (RATE_MODES).
run_rate() {
  for mode in ${RATE_MODES:-relay pages none}; do
    local flags="$SERVE8B --host_cache_bytes=$((64 << 30)) --max_batch=64 $(prompt_mode_flags "$mode")"
    timeout "${RATE_TIMEOUT:-280}" "$B/strata" bench --find_rate --rate=${RATE_START:-4} --slo_ttft_ms=1000 \
      --find_rate_probes=${RATE_PROBES:-6} --sessions=64 --turns=2 --think_s=1 --prompt_tokens=128 \
      --output_tokens=128 --max_output_tokens=128 --max_context_tokens=16384 --system_prompts=1 \
      --system_prompt_tokens=4096 --serve_flags="$flags" --json="$OUT/bench-rate-$mode.json" \
      >"$OUT/bench-rate-$mode.txt" 2>"$OUT/bench-rate-$mode.err"
    note "bench find_rate S=4096 $mode: rc=$?"
    grep -E "rate .*sessions/s|highest rate|search stopped" "$OUT/bench-rate-$mode.txt" >>"$summary"
  done
}

# Relay attention: its GPU tests, the kernel against plain decode and the copy floor, and
# PyTorch on the same shapes.
run_relay() {
  timeout 300 "$B/cuda_prefill_attention_test" --gtest_brief=1 >"$OUT/test-relay-kernels.log" 2>&1
  note "cuda_prefill_attention_test: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test-relay-kernels.log" | tr '\n' ' ')"
  grep -E 'Failure|error' "$OUT/test-relay-kernels.log" | head -10 >>"$summary"
  "$B/relay_attention_bench" >"$OUT/relay_attention_bench.txt" 2>&1
  note "relay_attention_bench: rc=$?"; cat "$OUT/relay_attention_bench.txt" >>"$summary"
  python3 tests/bench/relay_torch_ref.py >"$OUT/relay_torch_ref.txt" 2>&1
  note "relay_torch_ref: rc=$?"; grep -vE "^$" "$OUT/relay_torch_ref.txt" >>"$summary"
}

run_prompts_many() {
  for mode in ${PROMPTS_MANY_MODES:-relay}; do
    local flags="$SERVE8B --host_cache_bytes=$((64 << 30)) --max_batch=64"
    flags="$flags $(prompt_mode_flags "$mode")"
    "$B/strata" bench --sessions=64 --rate=1000 --turns=2 --think_s=0.2 --prompt_tokens=640 --output_tokens=64 \
      --max_output_tokens=64 --max_context_tokens=16384 --system_prompts=3 --system_prompt_tokens=4096 \
      --compare=cache_off --max_differing_turns="${PROMPTS_MANY_MAX_DIFFER:-40}" --serve_flags="$flags" \
      --json="$OUT/bench-prompts-many-$mode.json" >"$OUT/bench-prompts-many-$mode.txt" 2>"$OUT/bench-prompts-many-$mode.err"
    local rc=$?
    note "bench prompts-many $mode (64 sessions, 3 x 4K prompts, ~640 own tokens, cache on vs off): rc=$rc"
    [ $rc = 0 ] || tail -3 "$OUT/bench-prompts-many-$mode.err" >>"$summary"
    grep -E "TTFT \(client\)|turns:|answers|host tier" "$OUT/bench-prompts-many-$mode.txt" >>"$summary"
  done
}

# The prompts A/B (4K prompt, 1K own tokens) with every kernel of the server traced through
# CUPTI (libstrata_kernel_trace.so; the machine has no Nsight Systems), then the traces summed
# by kernel side by side (tests/gpu/kernel_trace.py). TRACE_MODES: relay chained.
run_trace() {
  local lib=$PWD/devbundle/lib/libstrata_kernel_trace.so traces=()
  for mode in ${TRACE_MODES:-relay chained}; do
    local trace=/tmp/trace-$mode.tsv
    rm -f "$trace"
    export CUDA_INJECTION64_PATH=$lib STRATA_KERNEL_TRACE=$trace
    PROMPT_S=4096 PROMPT_OWN=1024 PROMPT_MODES=$mode run_prompts
    unset CUDA_INJECTION64_PATH STRATA_KERNEL_TRACE
    note "trace $mode: $(wc -l <"$trace") kernels"
    traces+=("$trace")
  done
  python3 tests/gpu/kernel_trace.py --from_kernel=Merge --top=${TRACE_TOP:-30} "${traces[@]}" >"$OUT/kernel-trace.txt" 2>&1
  cat "$OUT/kernel-trace.txt" >>"$summary"
  for t in "${traces[@]}"; do xz -T0 -3 -c "$t" >"$OUT/$(basename "$t").xz"; done
}

run_batch() {
  timeout 560 "$B/batch_bench" --strata="$B/strata" ${BATCH_ARGS:-} \
    --serve_flags="--model=random:llama3-8b --device=cuda --host_cache_bytes=17179869184 ${BATCH_SERVE_FLAGS:-}" \
    >"$OUT/batch_bench.txt" 2>&1
  note "batch_bench: rc=$?"; grep -E '^\||^##|global plan' "$OUT/batch_bench.txt" >>"$summary"
}

run_decode_bench() {
  "$B/decode_attention_bench" >"$OUT/decode_attention_bench.txt" 2>&1
  note "decode_attention_bench: rc=$?"; cat "$OUT/decode_attention_bench.txt" >>"$summary"
}

run_step() {
  "$B/model_bench" --models="${MODELS:-llama3-8b}" >"$OUT/model_bench.txt" 2>&1
  note "model_bench: rc=$?"; grep -iE 'device:|decode|batch|^\|' "$OUT/model_bench.txt" | head -60 >>"$summary"
}

for phase in "$@"; do
  case $phase in
    tests) run_tests ;; hf) run_hf ;; sanitize) run_sanitize ;; kernels) run_gpu_tests cuda_dependent_launch_test cuda_kernels_test cuda_prefill_attention_test ;;
    decode-bench) run_decode_bench ;;
    gemm) "$B/gemm_bench" >"$OUT/gemm_bench.txt" 2>&1
      note "gemm_bench: rc=$?"; grep -E '^\|' "$OUT/gemm_bench.txt" >>"$summary" ;;
    step-kernels) for m in $(echo "${MODELS:-llama3-8b}" | tr , ' '); do for shape in ${STEP_SHAPES:-64,1024}; do
        csv="$OUT/step-kernels-$m-${shape/,/x}.csv"
        timeout 300 ncu --profile-from-start off --cache-control none --clock-control none --csv --page raw \
          --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
          "$B/model_bench" --models="$m" --profile="$shape" >"$csv" 2>/dev/null
        note "step kernels $m $shape: rc=$?"; python3 tests/gpu/step_kernels.py "$csv" | head -16 >>"$summary"
      done; done ;;
    pair) for m in ${PAIR_MODELS:-qwen2.5-7b qwen3-8b}; do
        timeout 280 "$B/model_bench" --pair="$m,llama3-8b" --rounds=7 >"$OUT/model_bench_pair_$m.txt" 2>&1
        note "model_bench --pair=$m,llama3-8b: rc=$?"; grep -E '^\|' "$OUT/model_bench_pair_$m.txt" >>"$summary"
      done ;;
    step-compare) "$B/model_bench" --models="${MODELS:-llama3-8b}" --decode_only --compare_skinny \
        >"$OUT/model_bench_compare.txt" 2>&1
      note "model_bench --compare_skinny: rc=$?"; grep -vE '^$' "$OUT/model_bench_compare.txt" >>"$summary" ;;
    bench-host) run_bench bench-host --hbm_cache_bytes=0 ;; bench-hbm) run_bench bench-hbm "" ;;
    step-e2e) run_step_e2e ;; sharegpt) run_sharegpt ;; step) run_step ;;
    hf-old) run_hf_old ;; kvload) run_kvload ;; writeback) run_writeback ;; gputests) run_gpu_tests cuda_model_kernels_test cuda_model_test cuda_engine_test ;;
    bench-ssd) run_bench_ssd ;; bench-host-history) run_bench_history bench-host --hbm_cache_bytes=0 ;;
    bench-hbm-history) run_bench_history bench-hbm "" ;;
    bench-hbm-settled) SWEEP_GAP=500 run_bench_history bench-hbm-settled "" ;;
    bench-hbm-stream) for rep in 1 2 3; do
                        for p in -1 0; do
                          HISTORY=1024,16384 REPEATS=7 COMPARE= SWEEP_GAP=500 BENCH_EXTRA=--chat_stream \
                            run_bench_history "bench-hbm-stream-pollers$p-$rep" "--cpu_idle_poll_threads=$p"
                        done
                      done
                      "$B/model_bench" --models=llama3-8b >"$OUT/model_bench.txt" 2>&1
                      note "model_bench: rc=$?"; grep -A4 '^history' "$OUT/model_bench.txt" >>"$summary" ;;
    bench-host-concurrent) run_bench_concurrent bench-host --hbm_cache_bytes=0 ;;
    relay-sweep) "$B/relay_attention_bench" --sweep >"$OUT/relay_sweep.txt" 2>&1
      note "relay_attention_bench --sweep: rc=$?"; sed -n '/balance/,$p' "$OUT/relay_sweep.txt" >>"$summary" ;;
    bench-host-settled) SWEEP_GAP=500 run_bench_history bench-host-settled --hbm_cache_bytes=0 ;;
    diag-host) for gap in 500 0; do
                 HISTORY=16384 REPEATS=5 COMPARE= SWEEP_GAP=$gap run_bench_history diag-host-gap$gap --hbm_cache_bytes=0
               done
               HISTORY=16384 REPEATS=5 COMPARE= run_bench_history diag-hbm "" ;;
    diag-copy) for v in "4 8 8192" "8 16 4096" "16 32 2048"; do
                 set -- $v
                 HISTORY=16384 REPEATS=5 COMPARE= SWEEP_GAP=500 run_bench_history "diag-copy-$1m" \
                   "--hbm_cache_bytes=0 --cuda_kv_read_copy_bytes=$(($1 << 20)) \
                    --cuda_kv_read_buffer_layers=$2 --cuda_kv_read_group_tokens=$3"
               done ;;
    nosplit) COMPARE= run_bench_history bench-hbm-nosplit --cuda_prefill_key_splits=false
             COMPARE= run_bench_history bench-host-nosplit "--hbm_cache_bytes=0 --cuda_prefill_key_splits=false" ;;
    prompts-many) run_prompts_many ;;
    relay-figure) timeout 120 "$B/cuda_prefill_attention_test" --gtest_brief=1 --gtest_filter='*Relay*' \
          >"$OUT/test-relay.log" 2>&1
        note "relay tests: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test-relay.log" | tr '\n' ' ')"
        grep -E 'Failure|differ' "$OUT/test-relay.log" | head -10 >>"$summary"
        for shape in 64,1024,1024 64,4096,1024 64,8192,1024 32,4096,1024; do
          timeout 60 "$B/relay_attention_bench" --shape="$shape" >"$OUT/relay-${shape//,/x}.txt" 2>&1
          note "relay_attention_bench $shape: rc=$?"; grep -E '^\| [0-9]' "$OUT/relay-${shape//,/x}.txt" >>"$summary"
        done
        timeout 200 "$B/relay_step_bench" >"$OUT/relay_step_bench.txt" 2>&1
        note "relay_step_bench: rc=$?"; grep -E '^\|' "$OUT/relay_step_bench.txt" >>"$summary"
        PROMPT_S=4096 PROMPT_OWN=1024 PROMPT_MODES="relay chained" run_prompts ;;
    relay-step) for shape in ${RELAY_STEP_SHAPES:-64,4096,1024}; do
        timeout 280 "$B/relay_step_bench" --shape="$shape" ${RELAY_STEP_CHUNK:+--chunk=$RELAY_STEP_CHUNK} \
          >"$OUT/relay_step_bench-${shape//,/x}.txt" 2>&1
        note "relay_step_bench $shape: rc=$?"; grep -E '^\|' "$OUT/relay_step_bench-${shape//,/x}.txt" >>"$summary"
      done ;;
    trace) run_trace ;;
    uneven) run_gpu_tests cuda_kernels_test cuda_prefill_attention_test cuda_model_test
        for how in --long=5120 --exponential; do
          out="$OUT/relay_step_bench${how//[-=]/_}.txt"
          timeout 300 "$B/relay_step_bench" $how >"$out" 2>&1
          note "relay_step_bench $how: rc=$?"; grep -E '^\||^own' "$out" >>"$summary"
        done
        PROMPT_S=4096 PROMPT_OWN=1024 PROMPT_MODES="relay chained" run_prompts
        note "the same, split for the longest row (--cuda_split_uneven_rows=false):"
        PROMPT_FLAGS=--cuda_split_uneven_rows=false PROMPT_S=4096 PROMPT_OWN=1024 PROMPT_MODES="relay chained" run_prompts ;;
    prompts) run_prompts ;; relay) run_relay ;; rate) run_rate ;; ppl) run_ppl ;; batch) run_batch ;;
    *) note "unknown phase $phase" ;;
  esac
done
echo "==== summary"; cat "$summary"
