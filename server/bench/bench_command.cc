#include "server/bench/bench_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/bench/answer_check.h"
#include "server/bench/bench_config.h"
#include "server/bench/metrics_delta.h"
#include "server/bench/rate_search.h"
#include "server/bench/report.h"
#include "server/bench/runner.h"
#include "server/serve_process.h"
#include "server/bench/workload.h"
#include "strata/v1/cache.grpc.pb.h"

namespace strata::server::bench {
namespace {

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

  // Runs `workload` against `e`, with /metrics scraped around it; the run's records go to
  // `result_out` when given.
  RunSummary RunOn(const Workload& workload, Endpoint& e, const std::string& tag, int min_threads = 1,
                   RunResult* result_out = nullptr) {
    return RunOn(std::vector<Workload>{workload}, e, tag, min_threads, result_out);
  }

  // Runs `workloads` one after the other (each with its own session IDs) and summarises
  // them as one run (whose records, sessions numbered across the workloads, go to
  // `result_out` when given; none when a run could not start).
  RunSummary RunOn(const std::vector<Workload>& workloads, Endpoint& e, const std::string& tag, int min_threads,
                   RunResult* result_out = nullptr) {
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
    if (result_out != nullptr) *result_out = result.ok() ? *std::move(result) : RunResult{};
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
    std::vector<RunResult> results;
    if (!ForEachEndpoint([&](size_t, Endpoint& e) {
          runs.push_back(RunOn(w, e, "run", 1, &results.emplace_back()));
          PrintSummary(table(), runs.back());
          std::fflush(table());
          json_["runs"].push_back(SummaryToJson(runs.back()));
        })) {
      return;
    }
    if (runs.size() == 2) {
      std::fprintf(table(), "[%s vs %s]\n", runs[0].label.c_str(), runs[1].label.c_str());
      PrintComparison(table(), runs[0], runs[1]);
      ReportAnswers(CheckAnswers(results[0], results[1]));
    }
  }

  // --compare: the answers line under the table, the counts in the JSON, and the
  // --max_differing_turns check.
  void ReportAnswers(const AnswerCheck& check) {
    std::fprintf(table(), "  %s\n", AnswerCheckLine(check).c_str());
    json_["answers"] = AnswerCheckToJson(check);
    if (c_.max_differing_turns >= 0 && check.TurnsDiffering() > c_.max_differing_turns) {
      Fail(absl::StrFormat("%d turns' answers differ from the cache-off server's, more than --max_differing_turns=%d",
                           check.TurnsDiffering(), c_.max_differing_turns));
      failed_ = true;
    }
  }

  static std::string ShapeTag(const SweepShape& shape) {
    return absl::StrCat("h", shape.history_tokens, "n", shape.new_tokens, "c", shape.concurrency);
  }

  void RunSweep() {
    std::fprintf(table(), "strata bench: sweep, turn-2 TTFT (client, ms) after a turn 1 of `history` tokens%s\n",
                 c_.chat_stream ? " (each session's turns on one ChatSession call)" : "");
    // runs[shape][server]: each server runs every shape before the next server starts.
    std::vector<std::vector<RunSummary>> runs(c_.shapes.size());
    std::vector<std::vector<RunResult>> results(c_.shapes.size());  // beside runs, for the answers
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
            runs[i].push_back(RunOn(repeats, e, ShapeTag(shape), shape.concurrency, &results[i].emplace_back()));
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
    AnswerCheck answers;  // over every shape
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
        const AnswerCheck check = CheckAnswers(results[i][0], results[i][1]);
        row["answers"] = AnswerCheckToJson(check);
        AddAnswerCheck(answers, check, ShapeTag(shape));
      }
      std::fprintf(table(), "%s\n", line.c_str());
      json_["sweep"].push_back(row);
    }
    if (specs_.size() == 2) ReportAnswers(answers);
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
