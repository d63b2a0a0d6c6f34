// `strata bench`'s configuration: its flags (defined in bench_config.cc, beside `strata
// chat`'s shared --target and --api_key) read and checked into one BenchConfig.
#ifndef STRATA_SERVER_BENCH_BENCH_CONFIG_H_
#define STRATA_SERVER_BENCH_BENCH_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/bench/rate_search.h"
#include "server/bench/workload.h"

namespace strata::server::bench {

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
  int max_differing_turns = -1;  // --compare: fail past this many differing answers; -1: no check
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

// The flags as a BenchConfig: InvalidArgument naming the flag for a bad value or
// combination (a --trace that cannot be read or holds no requests included).
absl::StatusOr<BenchConfig> ConfigFromFlags();

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_BENCH_CONFIG_H_
