// The placement simulator: replays a multi-turn trace through every placement policy
// (scheduler-aware, LRU, FIFO, Belady — the same code the live store runs) over modelled
// tiers, at several host/SSD capacities given as fractions of the trace's working set,
// and prints one Markdown table per trace.
//
//   build/tests/bench/placement_bench [--trace=FILE]... [--synthetic] [--quick]
//       [--sessions=9000] [--mean_turns=5.75] [--session_rate=1.0] [--mean_prompt=100]
//       [--mean_output=300] [--mean_think_s=60] [--seed=1]
//       [--slots=32] [--prefill_tps=10000] [--decode_ms=20] [--ssd_gbps=3] [--hint_lead_s=0]
//       [--kv_bytes_per_token=131072] [--block_tokens=256] [--capacities=H:S,H:S,...]
//
// FILE is JSONL in the Mooncake format (timestamp, input_length, output_length, hash_ids)
// or with an explicit session_id (storage/sim/trace.h). Without --trace, the synthetic
// AttentionStore-shaped trace is used (--synthetic adds it to the given traces).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "storage/sim/placement_sim.h"
#include "storage/sim/trace.h"

namespace {

using strata::storage::CapacityPoint;
using strata::storage::ComparePolicies;
using strata::storage::SimOptions;
using strata::storage::SyntheticTraceOptions;
using strata::storage::Trace;

bool Flag(const std::string& arg, const std::string& name, std::string* value) {
  const std::string prefix = "--" + name + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

int Usage() {
  std::fprintf(stderr,
               "usage: placement_bench [--trace=FILE]... [--synthetic] [--quick] [--sessions=N] [--mean_turns=X]\n"
               "  [--session_rate=X] [--mean_prompt=X] [--mean_output=X] [--mean_think_s=X] [--seed=N] [--slots=N]\n"
               "  [--prefill_tps=X] [--decode_ms=X] [--ssd_gbps=X] [--hint_lead_s=X] [--kv_bytes_per_token=N]\n"
               "  [--block_tokens=N]\n"
               "  [--capacities=H:S,...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> traces;
  bool synthetic = false;
  bool quick = false;
  SyntheticTraceOptions gen;
  SimOptions sim;
  std::vector<CapacityPoint> points = {{0.02, 0.25}, {0.05, 0.25}, {0.05, 0.5}, {0.1, 0.5}, {0.02, 1.0}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    double d = 0;
    int64_t n = 0;
    bool ok = true;
    if (a == "--synthetic") {
      synthetic = true;
    } else if (a == "--quick") {
      quick = true;
    } else if (Flag(a, "trace", &v)) {
      traces.push_back(v);
    } else if (Flag(a, "sessions", &v)) {
      ok = absl::SimpleAtoi(v, &n) && n > 0;
      gen.sessions = n;
    } else if (Flag(a, "mean_turns", &v)) {
      ok = absl::SimpleAtod(v, &gen.mean_turns) && gen.mean_turns >= 1;
    } else if (Flag(a, "session_rate", &v)) {
      ok = absl::SimpleAtod(v, &gen.session_rate_per_s) && gen.session_rate_per_s > 0;
    } else if (Flag(a, "mean_prompt", &v)) {
      ok = absl::SimpleAtod(v, &gen.mean_prompt_tokens) && gen.mean_prompt_tokens >= 1;
    } else if (Flag(a, "mean_output", &v)) {
      ok = absl::SimpleAtod(v, &gen.mean_output_tokens) && gen.mean_output_tokens >= 1;
    } else if (Flag(a, "mean_think_s", &v)) {
      ok = absl::SimpleAtod(v, &gen.mean_think_s) && gen.mean_think_s >= 0;
    } else if (Flag(a, "seed", &v)) {
      ok = absl::SimpleAtoi(v, &gen.seed);
    } else if (Flag(a, "slots", &v)) {
      ok = absl::SimpleAtoi(v, &sim.slots) && sim.slots > 0;
    } else if (Flag(a, "prefill_tps", &v)) {
      ok = absl::SimpleAtod(v, &sim.prefill_tokens_per_s) && sim.prefill_tokens_per_s > 0;
    } else if (Flag(a, "decode_ms", &v)) {
      ok = absl::SimpleAtod(v, &sim.decode_ms_per_token) && sim.decode_ms_per_token >= 0;
    } else if (Flag(a, "hint_lead_s", &v)) {
      ok = absl::SimpleAtod(v, &d) && d >= 0;
      sim.hint_lead_ms = d * 1e3;
    } else if (Flag(a, "ssd_gbps", &v)) {
      ok = absl::SimpleAtod(v, &d) && d > 0;
      sim.ssd_read_bytes_per_s = d * 1e9;
    } else if (Flag(a, "kv_bytes_per_token", &v)) {
      ok = absl::SimpleAtoi(v, &sim.kv_bytes_per_token) && sim.kv_bytes_per_token > 0;
    } else if (Flag(a, "block_tokens", &v)) {
      ok = absl::SimpleAtoi(v, &sim.block_tokens) && sim.block_tokens > 0;
    } else if (Flag(a, "capacities", &v)) {
      points.clear();
      for (absl::string_view p : absl::StrSplit(v, ',')) {
        std::vector<std::string> hs = absl::StrSplit(p, ':');
        CapacityPoint c;
        ok = ok && hs.size() == 2 && absl::SimpleAtod(hs[0], &c.host_fraction) &&
             absl::SimpleAtod(hs[1], &c.ssd_fraction) && c.host_fraction >= 0 && c.ssd_fraction >= 0;
        points.push_back(c);
      }
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad argument: %s\n", a.c_str());
      return Usage();
    }
  }
  if (quick) {
    gen.sessions = std::min<int64_t>(gen.sessions, 300);
    points = {{0.05, 0.25}};
  }
  if (traces.empty()) synthetic = true;
  if (synthetic) {
    Trace t = strata::storage::SyntheticTrace(gen);
    std::printf("## Synthetic (AttentionStore-shaped): %lld sessions, mean %.2f turns, %.2f sessions/s, prompt %.0f, "
                "answer %.0f tokens, think %.0f s, seed %llu\n",
                static_cast<long long>(gen.sessions), gen.mean_turns, gen.session_rate_per_s, gen.mean_prompt_tokens,
                gen.mean_output_tokens, gen.mean_think_s, static_cast<unsigned long long>(gen.seed));
    std::printf("Model: %d slots, prefill %.0f tokens/s, decode %.0f ms/token, SSD %.1f GB/s, %lld KV bytes/token, "
                "%lld-token blocks, gateway hints %.1f s ahead\n\n",
                sim.slots, sim.prefill_tokens_per_s, sim.decode_ms_per_token, sim.ssd_read_bytes_per_s / 1e9,
                static_cast<long long>(sim.kv_bytes_per_token), static_cast<long long>(sim.block_tokens),
                sim.hint_lead_ms / 1e3);
    std::printf("%s\n", ComparePolicies(t, sim, points).c_str());
  }
  for (const std::string& path : traces) {
    auto t = strata::storage::LoadTrace(path);
    if (!t.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(t.status().message()).c_str());
      return 1;
    }
    std::printf("## Trace %s\n\n%s\n", path.c_str(), ComparePolicies(*t, sim, points).c_str());
  }
  return 0;
}
