// Report of a bench run: percentiles and totals from the runner's records and the
// server's counters, printed as a table or written as JSON.
#ifndef STRATA_SERVER_BENCH_REPORT_H_
#define STRATA_SERVER_BENCH_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/bench/metrics_delta.h"
#include "server/bench/runner.h"

namespace strata::server::bench {

struct LatencyStats {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // 0 when count == 0
};

// Nearest-rank percentiles (p99 of 100 values is the 99th smallest).
LatencyStats ComputeLatencyStats(std::vector<double> values);

struct RunSummary {
  std::string label;  // e.g. "cache_on", "cache_off"
  int64_t turns_ok = 0;
  int64_t turns_failed = 0;
  int64_t turns_not_sent = 0;                    // later turns of failed sessions
  std::map<std::string, int64_t> errors_by_code;  // "unavailable" -> count
  // Over the measured turns that succeeded (a sweep measures turn 2 only).
  LatencyStats ttft_client_ms, ttft_server_ms, inter_token_ms, e2e_ms;
  double wall_s = 0;
  double requests_per_s = 0;       // successful turns / wall_s
  double output_tokens_per_s = 0;  // completion tokens / wall_s
  // Sums over every successful turn, from ChatDone.
  int64_t prompt_tokens = 0, cached_tokens = 0, computed_tokens = 0, completion_tokens = 0;
  std::map<std::string, int64_t> hits_by_tier;  // ChatDone.cache_tier of successful turns: "host" -> count
  std::optional<ServerCounters> server;         // /metrics over the run, when it could be scraped

  int64_t Hits() const;
};

// Summarises `result`; `server` is what /metrics moved over the same run (if known).
RunSummary Summarize(std::string label, const RunResult& result, std::optional<ServerCounters> server);

// The table of one run.
void PrintSummary(std::FILE* out, const RunSummary& summary);
// Two runs of one workload side by side, with ratios a/b (e.g. cached/recomputed).
void PrintComparison(std::FILE* out, const RunSummary& a, const RunSummary& b);

nlohmann::json SummaryToJson(const RunSummary& summary);

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_REPORT_H_
