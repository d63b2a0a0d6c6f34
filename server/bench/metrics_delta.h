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
  // Where the server's TTFT went, summed over the run's turns: arrival to admission, and
  // admission to the first token (queue + prefill = TTFT), of which the admission's own work
  // (sequence taken, prefix matched, loads queued).
  double queue_sum_s = 0;     // strata_queue_seconds_sum
  double prefill_sum_s = 0;   // strata_prefill_seconds_sum
  double admit_sum_s = 0;     // strata_admit_seconds_sum
  // Cached KV moved (strata_kv_transfer_bytes_total) and, on a device backend, the loads'
  // device time and the time steps waited for them.
  double kv_load_bytes = 0;          // {direction="load"}
  double kv_save_bytes = 0;          // {direction="save"}
  double kv_loads = 0;               // strata_kv_loads_total
  double kv_load_device_s = 0;       // strata_kv_load_device_seconds_total
  double kv_load_stall_s = 0;        // strata_kv_load_stall_seconds_total
  // The server's forward steps by what they held (strata_step_seconds{kind}: decode, prefill,
  // mixed): how many, and their summed time.
  std::map<std::string, double> steps_by_kind, step_seconds_by_kind;
  // Where the server's engine thread spent the run (strata_engine_thread_seconds_total{part}:
  // forward, schedule, emit, release, idle), seconds.
  std::map<std::string, double> engine_seconds_by_part;
  double system_prompt_hits = 0;      // strata_system_prompt_hits_total
  double system_prompts_computed = 0; // strata_system_prompt_loads_total{source="computed"}
  // Gauges at the end of the run (not deltas): what the host tier holds.
  double host_bytes = 0;      // strata_tier_bytes{tier="host"}
  double host_sessions = 0;   // strata_sessions{tier="host"} (shared prompts' included)
};

// Subtracts `before` from `after` for the counters above; a sample missing from either
// side counts as 0 there (a server with the cache off exports no hits).
ServerCounters CountersBetween(const MetricsSample& before, const MetricsSample& after);

// Adds the counters of a later part of a run to `total`; the gauges become the part's (the
// values at its end).
void Accumulate(ServerCounters& total, const ServerCounters& part);

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_METRICS_DELTA_H_
