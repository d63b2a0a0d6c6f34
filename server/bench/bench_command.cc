#include "server/bench/bench_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/bench/metrics_delta.h"
#include "server/bench/rate_search.h"
#include "server/bench/report.h"
#include "server/bench/runner.h"
#include "server/serve_process.h"
#include "server/bench/workload.h"
#include "server/cli/shared_flags.h"
#include "strata/v1/cache.grpc.pb.h"
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

enum class Mode { kSynthetic, kTrace, kSweep };

struct BenchConfig {
  Mode mode = Mode::kSynthetic;
  std::string workload_name;
  SyntheticWorkloadOptions synthetic;
  std::optional<Workload> fixed;      // synthetic (without --find_rate) or trace
  std::vector<SweepShape> shapes;     // sweep
  std::string target, metrics_target, api_key;
  std::vector<std::string> serve_flags;
  bool compare = false;
  std::string compare_target, compare_metrics_target;
  std::string json;
  bool find_rate = false;
  RateSearchOptions rate_search;
  int client_threads = 64;
  absl::Duration request_timeout;
  bool chat_stream = false;
  int sweep_repeats = 1;
  bool sweep_from_ssd = false;
  bool warm_system_prompts = false;
};

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

// A progress bar with ETA on stderr, drawn only when stderr is a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) == 1) {}
  ~ProgressBar() {
    if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
  }
  void Update(int64_t done, int64_t total) {
    if (!enabled_ || total <= 0) return;
    const absl::Time now = absl::Now();
    if (done < total && now - last_ < absl::Milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    const double elapsed_s = absl::ToDoubleSeconds(now - start_);
    const std::string eta = done > 0 ? absl::StrFormat("%.0fs", elapsed_s * (total - done) / done) : "?";
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld turns, ETA %s\033[K", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), eta.c_str());
  }

 private:
  const std::string label_;
  const bool enabled_;
  bool drawn_ = false;
  const absl::Time start_ = absl::Now();
  absl::Time last_ = absl::InfinitePast();
};

// A server to run against: given (--target) or started here.
struct Endpoint {
  std::string label;
  std::string target;
  std::string metrics_target;
  std::vector<std::string> serve_flags;  // of a server the bench starts
  std::unique_ptr<ServeProcess> owned;
};

absl::StatusOr<Endpoint> OpenEndpoint(std::string label, const std::string& target, const std::string& metrics_target,
                                      std::vector<std::string> serve_flags) {
  Endpoint e;
  e.label = std::move(label);
  if (!target.empty()) {
    e.target = target;
    e.metrics_target = metrics_target;
    return e;
  }
  std::fprintf(stderr, "strata bench: starting strata serve %s\n", absl::StrJoin(serve_flags, " ").c_str());
  absl::StatusOr<std::unique_ptr<ServeProcess>> p = ServeProcess::Start("/proc/self/exe", serve_flags);
  if (!p.ok()) return p.status();
  e.owned = *std::move(p);
  e.serve_flags = std::move(serve_flags);
  e.target = e.owned->target();
  e.metrics_target = e.owned->metrics_target();
  return e;
}

class Bench {
 public:
  explicit Bench(BenchConfig config) : c_(std::move(config)) {
    session_prefix_ = absl::StrFormat("bench%x-%d-", static_cast<uint32_t>(absl::ToUnixMillis(absl::Now())), getpid());
  }

  int Run() {
    specs_.push_back({c_.compare ? "cached" : "strata", c_.target, c_.metrics_target, c_.serve_flags});
    if (c_.compare) {
      std::vector<std::string> flags = c_.serve_flags;
      flags.push_back("--cache=off");
      specs_.push_back({"recomputed", c_.compare_target, c_.compare_metrics_target, std::move(flags)});
    }
    json_ = {{"workload", c_.workload_name}, {"seed", c_.synthetic.seed}};
    if (c_.find_rate) {
      RunFindRate();
    } else if (c_.mode == Mode::kSweep) {
      RunSweep();
    } else {
      RunFixed();
    }
    json_["failed"] = failed_;
    if (!WriteJson()) return 1;
    return failed_ ? 1 : 0;
  }

 private:
  // A server to run against, opened when its turn comes (see ForEachEndpoint).
  struct EndpointSpec {
    std::string label, target, metrics_target;
    std::vector<std::string> serve_flags;
  };

  std::FILE* table() const { return c_.json == "-" ? stderr : stdout; }

  int Fail(const std::string& message) {
    std::fprintf(stderr, "strata bench: %s\n", message.c_str());
    return 1;
  }

  // Runs `fn` against each server in turn. A server the bench starts itself is started
  // just before its runs and stopped after them, so the two servers of --compare never
  // run at once: they do not compete for the machine (or, on a GPU, for its memory).
  // Returns false, having reported it, when a server cannot be started.
  bool ForEachEndpoint(const std::function<void(size_t, Endpoint&)>& fn) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const EndpointSpec& spec = specs_[i];
      absl::StatusOr<Endpoint> e = OpenEndpoint(spec.label, spec.target, spec.metrics_target, spec.serve_flags);
      if (!e.ok()) {
        Fail(absl::StrCat("cannot start the ", spec.label, " server: ", e.status().ToString()));
        failed_ = true;
        return false;
      }
      fn(i, *e);
    }
    return true;
  }

  // --warm_system_prompts: one one-token turn per system prompt of the workloads, before
  // the run and its /metrics scrape, so the server holds the prompts when it starts.
  void WarmSystemPrompts(const std::vector<Workload>& workloads, Endpoint& e, const std::string& tag) {
    if (workloads.empty() || workloads[0].system_prompts.empty()) return;
    Workload warm;
    warm.name = "warm-up";
    warm.system_prompts = workloads[0].system_prompts;
    for (size_t k = 0; k < warm.system_prompts.size(); ++k) {
      warm.sessions.push_back(WorkloadSession{absl::StrCat("prompt", k), static_cast<int>(k),
                                              {WorkloadTurn{0, {1}, 1, false}}});
    }
    RunnerOptions o;
    o.target = e.target;
    o.api_key = c_.api_key;
    o.client_threads = 1;
    o.request_timeout = c_.request_timeout;
    o.chat_stream = c_.chat_stream;
    o.session_prefix = absl::StrCat(session_prefix_, tag, "-warm-");
    absl::StatusOr<RunResult> r = RunWorkload(warm, o);
    if (!r.ok()) std::fprintf(stderr, "strata bench: warming the system prompts: %s\n", r.status().ToString().c_str());
  }

  // Runs `workload` against `e`, with /metrics scraped around it.
  RunSummary RunOn(const Workload& workload, Endpoint& e, const std::string& tag, int min_threads = 1) {
    return RunOn(std::vector<Workload>{workload}, e, tag, min_threads);
  }

  // Runs `workloads` one after the other (each with its own session IDs) and summarises
  // them as one run.
  RunSummary RunOn(const std::vector<Workload>& workloads, Endpoint& e, const std::string& tag, int min_threads) {
    if (c_.warm_system_prompts) WarmSystemPrompts(workloads, e, tag);
    // The server's counters over each workload, or for a workload of rounds (a sweep)
    // over its last round, the measured one: scraped before it (after any restart) and at
    // its end, and added up over the workloads.
    std::optional<MetricsSample> before;
    bool scrape_failed = false;
    auto scrape = [&](const char* when) -> std::optional<MetricsSample> {
      if (e.metrics_target.empty() || scrape_failed) return std::nullopt;
      absl::StatusOr<MetricsSample> s = ScrapeMetrics(e.metrics_target);
      if (s.ok()) return *std::move(s);
      std::fprintf(stderr, "strata bench: /metrics of %s %s: %s\n", e.label.c_str(), when,
                   s.status().ToString().c_str());
      scrape_failed = true;
      return std::nullopt;
    };
    std::optional<ServerCounters> counters;
    ProgressBar bar(absl::StrCat(e.label, " ", tag));
    RunnerOptions o;
    o.target = e.target;
    o.api_key = c_.api_key;
    o.client_threads = std::max(c_.client_threads, min_threads);
    o.request_timeout = c_.request_timeout;
    o.chat_stream = c_.chat_stream;
    const bool cached = std::find(e.serve_flags.begin(), e.serve_flags.end(), "--cache=off") == e.serve_flags.end();
    const bool restart = c_.sweep_from_ssd && e.owned != nullptr && cached;
    o.server_restarts = restart;
    o.between_rounds = [this, &e, &before, &scrape, restart](const std::vector<std::string>& ids) {
      if (restart) PersistAndRestart(e, ids);
      before = scrape("before the measured round");
    };
    absl::StatusOr<RunResult> result = RunResult{};
    int64_t done_before = 0, total = 0, sessions_before = 0;
    for (const Workload& w : workloads) total += w.TotalTurns();
    for (size_t i = 0; i < workloads.size() && result.ok(); ++i) {
      o.session_prefix = absl::StrCat(session_prefix_, tag, workloads.size() > 1 ? absl::StrCat("r", i) : "", "-");
      o.on_progress = [&bar, done_before, total](int64_t done, int64_t) { bar.Update(done_before + done, total); };
      before = scrape("before the run");
      absl::StatusOr<RunResult> part = RunWorkload(workloads[i], o);
      if (!part.ok()) {
        result = part.status();
        break;
      }
      if (before) {
        if (std::optional<MetricsSample> after = scrape("after the run")) {
          const ServerCounters part_counters = CountersBetween(*before, *after);
          if (counters) {
            Accumulate(*counters, part_counters);
          } else {
            counters = part_counters;
          }
        }
      }
      if (scrape_failed) counters.reset();
      for (TurnRecord& t : part->turns) {
        t.session += static_cast<int>(sessions_before);
        result->turns.push_back(std::move(t));
      }
      result->not_sent_turns += part->not_sent_turns;
      result->wall_s += part->wall_s;
      done_before += workloads[i].TotalTurns();
      sessions_before += static_cast<int64_t>(workloads[i].sessions.size());
    }
    RunSummary summary = Summarize(e.label, result.ok() ? *result : RunResult{}, counters);
    if (!result.ok() || summary.turns_failed > 0 || summary.turns_not_sent > 0) failed_ = true;
    return summary;
  }

  // --sweep_from_ssd, between turn 1 and turn 2: every session persisted, then the server
  // restarted on the same ports, so turn 2 finds its history only on SSD (host tier and
  // HBM are empty after a restart) and no hint says it is coming.
  void PersistAndRestart(Endpoint& e, const std::vector<std::string>& ids) {
    const absl::Time start = absl::Now();
    auto stub = v1::CacheService::NewStub(grpc::CreateChannel(e.target, grpc::InsecureChannelCredentials()));
    v1::FlushRequest request;
    for (const std::string& id : ids) request.add_session_ids(id);
    request.set_timeout_ms(300000);
    grpc::ClientContext context;
    if (!c_.api_key.empty()) context.AddMetadata("authorization", "Bearer " + c_.api_key);
    v1::FlushResponse response;
    if (grpc::Status s = stub->Flush(&context, request, &response); !s.ok()) {
      std::fprintf(stderr, "strata bench: Flush before the restart: %s\n", s.error_message().c_str());
      failed_ = true;
    }
    const absl::Time flushed = absl::Now();
    const int port = e.owned->port(), metrics_port = e.owned->metrics_port();
    e.owned->Stop();
    std::vector<std::string> flags = e.serve_flags;
    flags.push_back(absl::StrCat("--port=", port));
    flags.push_back(absl::StrCat("--metrics_port=", metrics_port));
    absl::StatusOr<std::unique_ptr<ServeProcess>> p = ServeProcess::Start("/proc/self/exe", flags);
    if (!p.ok()) {
      std::fprintf(stderr, "strata bench: restarting the server: %s\n", p.status().ToString().c_str());
      failed_ = true;
      return;
    }
    e.owned = *std::move(p);
    std::fprintf(stderr, "strata bench: %zu sessions persisted in %.1f s; server restarted in %.1f s\n", ids.size(),
                 absl::ToDoubleSeconds(flushed - start), absl::ToDoubleSeconds(absl::Now() - flushed));
  }

  void RunFixed() {
    const Workload& w = *c_.fixed;
    std::fprintf(table(), "strata bench: %s workload, %zu sessions, %lld turns, seed %llu\n", w.name.c_str(),
                 w.sessions.size(), static_cast<long long>(w.TotalTurns()),
                 static_cast<unsigned long long>(c_.synthetic.seed));
    json_["sessions"] = w.sessions.size();
    json_["turns"] = w.TotalTurns();
    std::vector<RunSummary> runs;
    if (!ForEachEndpoint([&](size_t, Endpoint& e) {
          runs.push_back(RunOn(w, e, "run"));
          PrintSummary(table(), runs.back());
          std::fflush(table());
          json_["runs"].push_back(SummaryToJson(runs.back()));
        })) {
      return;
    }
    if (runs.size() == 2) {
      std::fprintf(table(), "[%s vs %s]\n", runs[0].label.c_str(), runs[1].label.c_str());
      PrintComparison(table(), runs[0], runs[1]);
    }
  }

  void RunSweep() {
    std::fprintf(table(), "strata bench: sweep, turn-2 TTFT (client, ms) after a turn 1 of `history` tokens%s\n",
                 c_.chat_stream ? " (each session's turns on one ChatSession call)" : "");
    // runs[shape][server]: each server runs every shape before the next server starts.
    std::vector<std::vector<RunSummary>> runs(c_.shapes.size());
    if (!ForEachEndpoint([&](size_t, Endpoint& e) {
          for (size_t i = 0; i < c_.shapes.size(); ++i) {
            const SweepShape& shape = c_.shapes[i];
            // Repeats run one after another, each with its own sessions and token IDs.
            std::vector<Workload> repeats;
            for (int r = 0; r < c_.sweep_repeats; ++r) {
              SweepShape repeat = shape;
              repeat.seed = shape.seed + static_cast<uint64_t>(r);
              repeats.push_back(*MakeSweepWorkload(repeat));
            }
            const std::string tag =
                absl::StrCat("h", shape.history_tokens, "n", shape.new_tokens, "c", shape.concurrency);
            runs[i].push_back(RunOn(repeats, e, tag, shape.concurrency));
          }
        })) {
      return;
    }
    std::string header = absl::StrFormat("%8s %6s %5s", "history", "new", "conc");
    for (const EndpointSpec& e : specs_) {
      header += absl::StrFormat(" | %-10s %9s %9s %9s %9s", e.label, "p50", "p99", "srv p50", "reused");
    }
    if (specs_.size() == 2) header += " | ratio p50  ratio p99";
    std::fprintf(table(), "%s\n", header.c_str());
    for (size_t i = 0; i < c_.shapes.size(); ++i) {
      const SweepShape& shape = c_.shapes[i];
      nlohmann::json row = {{"history_tokens", shape.history_tokens},
                            {"new_tokens", shape.new_tokens},
                            {"concurrency", shape.concurrency}};
      std::string line = absl::StrFormat("%8d %6d %5d", shape.history_tokens, shape.new_tokens, shape.concurrency);
      for (const RunSummary& s : runs[i]) {
        line += absl::StrFormat(" | %-10s %9.1f %9.1f %9.1f %9d", s.turns_failed > 0 ? "ERRORS" : "", s.ttft_client_ms.p50,
                                s.ttft_client_ms.p99, s.ttft_server_ms.p50, s.cached_tokens);
        row["runs"].push_back(SummaryToJson(s));
      }
      if (runs[i].size() == 2) {
        auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
        line += absl::StrFormat(" | %9.3f  %9.3f", ratio(runs[i][0].ttft_client_ms.p50, runs[i][1].ttft_client_ms.p50),
                                ratio(runs[i][0].ttft_client_ms.p99, runs[i][1].ttft_client_ms.p99));
      }
      std::fprintf(table(), "%s\n", line.c_str());
      json_["sweep"].push_back(row);
    }
  }

  void RunFindRate() {
    std::fprintf(table(), "strata bench: find_rate, p99 TTFT (client) <= %.1f ms, at most %d probes\n",
                 c_.rate_search.slo_ttft_ms, c_.rate_search.max_probes);
    ForEachEndpoint([&](size_t, Endpoint& e) {
      int probe_index = 0;
      nlohmann::json probes = nlohmann::json::array();
      auto p99_at = [&](double rate) -> absl::StatusOr<double> {
        SyntheticWorkloadOptions o = c_.synthetic;
        o.session_rate_per_s = rate;
        absl::StatusOr<Workload> w = MakeSyntheticWorkload(o);
        if (!w.ok()) return w.status();
        RunSummary s = RunOn(*w, e, absl::StrCat("rate", probe_index++));
        probes.push_back({{"rate", rate}, {"summary", SummaryToJson(s)}});
        if (s.turns_failed > 0) {
          PrintSummary(table(), s);
          return absl::UnavailableError(absl::StrFormat("%d turns failed at rate %.3f", s.turns_failed, rate));
        }
        return s.ttft_client_ms.p99;
      };
      auto print = [&](const RateProbe& p) {
        std::fprintf(table(), "  [%s] rate %8.3f sessions/s: p99 TTFT %9.1f ms  %s\n", e.label.c_str(), p.rate,
                     p.p99_ttft_ms, p.passed ? "meets the SLO" : "misses the SLO");
        std::fflush(table());
      };
      absl::StatusOr<RateSearchResult> r = FindRate(c_.rate_search, p99_at, print);
      nlohmann::json j = {{"label", e.label}, {"slo_ttft_ms", c_.rate_search.slo_ttft_ms}, {"probes", probes}};
      if (!r.ok()) {
        failed_ = true;
        std::fprintf(table(), "  [%s] search stopped: %s\n", e.label.c_str(), r.status().ToString().c_str());
        j["error"] = r.status().ToString();
      } else {
        std::fprintf(table(), "  [%s] highest rate meeting the SLO: %.3f sessions/s%s\n", e.label.c_str(), r->best_rate,
                     r->best_rate == 0 ? " (none of the probes did)" : "");
        j["best_rate"] = r->best_rate;
      }
      json_["find_rate"].push_back(j);
    });
  }

  bool WriteJson() {
    if (c_.json.empty()) return true;
    const std::string text = json_.dump(2) + "\n";
    if (c_.json == "-") {
      std::fputs(text.c_str(), stdout);
      return true;
    }
    std::ofstream f(c_.json);
    f << text;
    f.close();
    if (!f) {
      std::fprintf(stderr, "strata bench: cannot write --json file '%s'\n", c_.json.c_str());
      return false;
    }
    return true;
  }

  const BenchConfig c_;
  std::string session_prefix_;
  std::vector<EndpointSpec> specs_;
  nlohmann::json json_;
  bool failed_ = false;
};

}  // namespace

int RunBenchCommand() {
  // main() blocks SIGINT/SIGTERM for `serve`; a bench stops on them (its server child too).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  absl::StatusOr<BenchConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "strata bench: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  return Bench(*std::move(config)).Run();
}

}  // namespace strata::server::bench
