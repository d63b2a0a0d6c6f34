#include "server/bench/bench_config.h"

#include <cmath>
#include <filesystem>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "server/cli/shared_flags.h"
#include "storage/sim/trace.h"

// --target and --api_key are shared with `strata chat` (server/cli/shared_flags.h).
ABSL_FLAG(std::string, workload, "",
          "bench: synthetic, trace or sweep (default: trace with --trace, sweep with --sweep, else synthetic)");
ABSL_FLAG(std::string, metrics_target, "",
          "bench: host:port of --target's /metrics (empty: counters over the run are not reported)");
ABSL_FLAG(std::string, serve_flags, "",
          "bench: flags for the `strata serve` that bench starts when no --target is given, space-separated");
ABSL_FLAG(std::string, compare, "",
          "bench: cache_off: run the same workload against a second server with --cache=off and print both");
ABSL_FLAG(std::string, compare_target, "", "bench: host:port of the --compare server (default: start one)");
ABSL_FLAG(std::string, compare_metrics_target, "", "bench: host:port of --compare_target's /metrics");
ABSL_FLAG(int, max_differing_turns, -1,
          "bench --compare: exit 1 (after the report) when more than N turns' answers differ from the cache-off "
          "server's (the report's `answers:` line counts them; -1: no check)");
ABSL_FLAG(int64_t, sessions, 32, "bench synthetic: sessions");
ABSL_FLAG(double, rate, 1.0, "bench synthetic: session arrivals per second (Poisson); --find_rate: first probe");
ABSL_FLAG(double, turns, 3, "bench synthetic: mean turns per session (1 + geometric)");
ABSL_FLAG(double, prompt_tokens, 64, "bench synthetic: mean new prompt tokens per turn (exponential)");
ABSL_FLAG(double, output_tokens, 32, "bench synthetic: mean answer tokens per turn (exponential)");
ABSL_FLAG(double, think_s, 1.0, "bench synthetic: mean think time between a session's turns, seconds (exponential)");
ABSL_FLAG(int64_t, max_context_tokens, 4096, "bench synthetic: longest prompt a session reaches (it ends there)");
ABSL_FLAG(int, system_prompts, 0, "bench synthetic: K shared system prompts, one per session (0: none)");
ABSL_FLAG(int64_t, system_prompt_tokens, 256, "bench synthetic: tokens of each shared system prompt");
ABSL_FLAG(bool, warm_system_prompts, false,
          "bench synthetic: before the measured run, one unmeasured turn per system prompt (a server that "
          "already holds its prompts, as after RegisterSystemPrompt; without it the first turns wait for each "
          "prompt's one computation)");
ABSL_FLAG(std::string, trace, "", "bench trace: session JSONL or Mooncake trace to replay with its timing");
ABSL_FLAG(double, time_scale, 1.0, "bench trace: multiply the trace's arrival times by this (0: all at once)");
ABSL_FLAG(bool, sweep, false, "bench: a TTFT table over --history x --new_tokens x --concurrency");
ABSL_FLAG(std::string, history, "1024,4096", "bench sweep: comma-separated turn-1 prompt lengths");
ABSL_FLAG(std::string, new_tokens, "64", "bench sweep: comma-separated new tokens of turn 2");
ABSL_FLAG(std::string, concurrency, "1", "bench sweep: comma-separated numbers of sessions sending turn 2 at once");
ABSL_FLAG(int, sweep_answer_tokens, 4, "bench sweep: answer tokens of turn 1");
ABSL_FLAG(int, sweep_output_tokens, 8, "bench sweep: answer tokens of turn 2");
ABSL_FLAG(double, sweep_gap_ms, 0,
          "bench sweep: pause between turn 1 and turn 2 (e.g. 500: turn 1's write-back lands first, so the history is "
          "settled in its tier; 0: turn 2 follows at once, beside the write-back)");
ABSL_FLAG(int, sweep_repeats, 1,
          "bench sweep: run each shape this many times, one after another (fresh sessions), as one sample set");
ABSL_FLAG(bool, sweep_from_ssd, false,
          "bench sweep: turn 2 finds its history only on SSD: after turn 1 the cached server persists every "
          "session (Flush) and is restarted (serve flags must name --ssd_dirs)");
ABSL_FLAG(int, max_output_tokens, 4096, "bench: cap on the answer tokens a turn asks for (server's limit)");
ABSL_FLAG(std::string, json, "", "bench: also write the report as JSON to this file (-: stdout; the table goes to stderr)");
ABSL_FLAG(bool, find_rate, false,
          "bench synthetic: search for the highest --rate whose p99 TTFT is <= --slo_ttft_ms");
ABSL_FLAG(double, slo_ttft_ms, 1000, "bench --find_rate: p99 TTFT objective, ms");
ABSL_FLAG(int, find_rate_probes, 8, "bench --find_rate: most runs of the search");
ABSL_FLAG(int, client_threads, 64, "bench: most turns in flight at once");
ABSL_FLAG(double, request_timeout_s, 600, "bench: deadline of one turn, seconds");
ABSL_FLAG(bool, chat_stream, false,
          "bench: send each session's turns on one ChatSession call (a stream per session, as a gateway may "
          "keep) instead of a Chat call per turn");

namespace strata::server::bench {
namespace {

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", item, "' is not a positive integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::StatusOr<BenchConfig> ConfigFromFlags() {
  BenchConfig c;
  std::string workload = absl::GetFlag(FLAGS_workload);
  if (workload.empty()) {
    workload = !absl::GetFlag(FLAGS_trace).empty() ? "trace" : absl::GetFlag(FLAGS_sweep) ? "sweep" : "synthetic";
  }
  if (workload == "synthetic") c.mode = Mode::kSynthetic;
  else if (workload == "trace") c.mode = Mode::kTrace;
  else if (workload == "sweep") c.mode = Mode::kSweep;
  else return Bad(absl::StrCat("unknown --workload '", workload, "' (synthetic, trace or sweep)"));
  c.workload_name = workload;

  const double rate = absl::GetFlag(FLAGS_rate);
  if (!std::isfinite(rate) || rate <= 0) return Bad(absl::StrCat("--rate must be > 0, got ", rate));
  c.synthetic.sessions = absl::GetFlag(FLAGS_sessions);
  c.synthetic.session_rate_per_s = rate;
  c.synthetic.mean_turns = absl::GetFlag(FLAGS_turns);
  c.synthetic.mean_prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  c.synthetic.mean_output_tokens = absl::GetFlag(FLAGS_output_tokens);
  c.synthetic.mean_think_s = absl::GetFlag(FLAGS_think_s);
  c.synthetic.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
  c.synthetic.system_prompts = absl::GetFlag(FLAGS_system_prompts);
  c.synthetic.system_prompt_tokens = absl::GetFlag(FLAGS_system_prompt_tokens);
  c.synthetic.max_new_tokens_limit = absl::GetFlag(FLAGS_max_output_tokens);
  c.synthetic.seed = absl::GetFlag(FLAGS_seed);
  if (c.synthetic.max_new_tokens_limit < 1) return Bad("--max_output_tokens must be >= 1");

  c.find_rate = absl::GetFlag(FLAGS_find_rate);
  if (c.find_rate && c.mode != Mode::kSynthetic) return Bad("--find_rate needs the synthetic workload");
  c.rate_search.start_rate = rate;
  c.rate_search.min_rate = std::min(rate / 2, 1.0 / 64);
  c.rate_search.slo_ttft_ms = absl::GetFlag(FLAGS_slo_ttft_ms);
  c.rate_search.max_probes = absl::GetFlag(FLAGS_find_rate_probes);
  if (c.find_rate) {
    if (absl::Status s = c.rate_search.Validate(); !s.ok()) return Bad(absl::StrCat("--find_rate: ", s.message()));
  }

  switch (c.mode) {
    case Mode::kSynthetic: {
      if (absl::Status s = c.synthetic.Validate(); !s.ok()) {
        return Bad(absl::StrCat("bad synthetic workload flags: ", s.message()));
      }
      if (!c.find_rate) c.fixed = *MakeSyntheticWorkload(c.synthetic);
      break;
    }
    case Mode::kTrace: {
      const std::string path = absl::GetFlag(FLAGS_trace);
      if (path.empty()) return Bad("--workload=trace needs --trace=FILE");
      absl::StatusOr<storage::Trace> trace = storage::LoadTrace(path);
      if (!trace.ok()) return Bad(absl::StrCat("--trace: cannot use '", path, "': ", trace.status().message()));
      TraceWorkloadOptions o;
      o.time_scale = absl::GetFlag(FLAGS_time_scale);
      o.max_new_tokens_limit = c.synthetic.max_new_tokens_limit;
      o.seed = c.synthetic.seed;
      absl::StatusOr<Workload> w = MakeTraceWorkload(*trace, o);
      if (!w.ok()) return Bad(absl::StrCat("--time_scale: ", w.status().message()));
      if (w->sessions.empty()) return Bad(absl::StrCat("--trace: '", path, "' has no requests"));
      c.fixed = *std::move(w);
      break;
    }
    case Mode::kSweep: {
      auto history = ParseList("history", absl::GetFlag(FLAGS_history));
      auto fresh = ParseList("new_tokens", absl::GetFlag(FLAGS_new_tokens));
      auto concurrency = ParseList("concurrency", absl::GetFlag(FLAGS_concurrency));
      for (const auto* list : {&history, &fresh, &concurrency}) {
        if (!list->ok()) return list->status();
      }
      for (int64_t h : *history) {
        for (int64_t n : *fresh) {
          for (int64_t k : *concurrency) {
            SweepShape shape{.history_tokens = h,
                             .new_tokens = n,
                             .concurrency = static_cast<int>(k),
                             .answer_tokens = absl::GetFlag(FLAGS_sweep_answer_tokens),
                             .output_tokens = absl::GetFlag(FLAGS_sweep_output_tokens),
                             .seed = c.synthetic.seed,
                             .gap_ms = absl::GetFlag(FLAGS_sweep_gap_ms)};
            if (absl::Status s = shape.Validate(); !s.ok()) return Bad(absl::StrCat("--", s.message()));
            c.shapes.push_back(shape);
          }
        }
      }
      break;
    }
  }

  c.target = absl::GetFlag(FLAGS_target);
  c.api_key = absl::GetFlag(FLAGS_api_key);
  c.metrics_target = absl::GetFlag(FLAGS_metrics_target);
  for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_serve_flags), absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    c.serve_flags.emplace_back(f);
  }
  const std::string compare = absl::GetFlag(FLAGS_compare);
  if (!compare.empty() && compare != "cache_off") {
    return Bad(absl::StrCat("unknown --compare '", compare, "' (cache_off)"));
  }
  c.compare = !compare.empty();
  c.compare_target = absl::GetFlag(FLAGS_compare_target);
  c.compare_metrics_target = absl::GetFlag(FLAGS_compare_metrics_target);
  if (!c.compare && !c.compare_target.empty()) return Bad("--compare_target needs --compare=cache_off");
  c.max_differing_turns = absl::GetFlag(FLAGS_max_differing_turns);
  if (c.max_differing_turns < -1) return Bad("--max_differing_turns must be >= 0, or -1 for no check");
  if (c.max_differing_turns >= 0 && !c.compare) return Bad("--max_differing_turns needs --compare=cache_off");
  if (c.max_differing_turns >= 0 && c.find_rate) {
    return Bad("--max_differing_turns: --find_rate probes other rates on each server, so no answers are compared");
  }
  c.json = absl::GetFlag(FLAGS_json);
  if (!c.json.empty() && c.json != "-") {
    const std::filesystem::path dir = std::filesystem::path(c.json).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      return Bad(absl::StrCat("--json: directory '", dir.string(), "' does not exist"));
    }
  }
  c.sweep_from_ssd = absl::GetFlag(FLAGS_sweep_from_ssd);
  c.warm_system_prompts = absl::GetFlag(FLAGS_warm_system_prompts);
  if (c.sweep_from_ssd) {
    if (c.mode != Mode::kSweep) return Bad("--sweep_from_ssd needs --workload=sweep");
    if (!c.target.empty()) return Bad("--sweep_from_ssd restarts the server: it must be one the bench starts");
    if (std::none_of(c.serve_flags.begin(), c.serve_flags.end(),
                     [](const std::string& f) { return absl::StartsWith(f, "--ssd_dirs="); })) {
      return Bad("--sweep_from_ssd needs an SSD tier: name --ssd_dirs in --serve_flags");
    }
  }
  c.client_threads = absl::GetFlag(FLAGS_client_threads);
  if (c.client_threads < 1) return Bad("--client_threads must be >= 1");
  const double timeout_s = absl::GetFlag(FLAGS_request_timeout_s);
  if (!(timeout_s > 0) || !std::isfinite(timeout_s)) return Bad("--request_timeout_s must be > 0");
  c.request_timeout = absl::Seconds(timeout_s);
  c.chat_stream = absl::GetFlag(FLAGS_chat_stream);
  c.sweep_repeats = absl::GetFlag(FLAGS_sweep_repeats);
  if (c.sweep_repeats < 1) return Bad("--sweep_repeats must be >= 1");
  return c;
}

}  // namespace strata::server::bench
