// What a strata server's /metrics counters moved over a bench run: scraped before and
// after, subtracted.
#ifndef STRATA_SERVER_BENCH_METRICS_DELTA_H_
#define STRATA_SERVER_BENCH_METRICS_DELTA_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace strata::server::bench {

// Samples keyed as metrics::ParsePrometheusText keys them.
using MetricsSample = std::map<std::string, double>;

// GETs http://<host_port>/metrics and parses it. Unavailable when the server cannot be
// reached; InvalidArgument when host_port is not host:port or the body does not parse.
// Blocks up to the HTTP client's timeout (10 s).
absl::StatusOr<MetricsSample> ScrapeMetrics(const std::string& host_port);

// The server's counters over a run (after - before).
struct ServerCounters {
  double prefill_computed_tokens = 0;  // strata_prefill_tokens_total{source="computed"}
  double prefill_reused_tokens = 0;    // strata_prefill_tokens_total{source="reused"}
  double cache_lookups = 0;            // strata_cache_lookups_total
  double generated_tokens = 0;         // strata_generated_tokens_total
  std::map<std::string, double> hits_by_tier;       // strata_cache_hits_total by tier label
  std::map<std::string, double> requests_by_code;   // strata_requests_total of Chat calls by code (non-zero only)
  double ttft_count = 0;      // strata_ttft_seconds_count
  double ttft_sum_s = 0;      // strata_ttft_seconds_sum
  double system_prompt_hits = 0;      // strata_system_prompt_hits_total
  double system_prompts_computed = 0; // strata_system_prompt_loads_total{source="computed"}
  // Gauges at the end of the run (not deltas): what the host tier holds.
  double host_bytes = 0;      // strata_tier_bytes{tier="host"}
  double host_sessions = 0;   // strata_sessions{tier="host"} (shared prompts' included)
};

// Subtracts `before` from `after` for the counters above; a sample missing from either
// side counts as 0 there (a server with the cache off exports no hits).
ServerCounters CountersBetween(const MetricsSample& before, const MetricsSample& after);

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_METRICS_DELTA_H_
