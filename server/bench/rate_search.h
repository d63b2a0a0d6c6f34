// FindRate: the highest arrival rate whose p99 TTFT stays under an SLO, by bracketing
// (doubling or halving from a start rate) and then bisecting, in a bounded number of probes.
#ifndef STRATA_SERVER_BENCH_RATE_SEARCH_H_
#define STRATA_SERVER_BENCH_RATE_SEARCH_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::server::bench {

struct RateSearchOptions {
  double start_rate = 1.0;     // first probe, sessions per second
  double slo_ttft_ms = 1000;   // a rate passes when its p99 TTFT is <= this
  int max_probes = 8;          // runs at most, bracketing included
  double min_rate = 1.0 / 64;  // halving stops here (the result is then 0)

  // InvalidArgument naming the field unless start_rate > min_rate > 0, slo_ttft_ms > 0 and
  // max_probes >= 2.
  absl::Status Validate() const;
};

struct RateProbe {
  double rate = 0;
  double p99_ttft_ms = 0;
  bool passed = false;
};

struct RateSearchResult {
  std::vector<RateProbe> probes;  // in the order they ran
  double best_rate = 0;           // highest passing rate probed; 0 if none passed
};

// Calls `p99_ttft_ms_at(rate)` once per probe (it runs the workload at that rate); an
// error from it ends the search and is returned. `on_probe` (may be empty) sees each probe
// as it finishes. Assumes p99 TTFT grows with the rate.
absl::StatusOr<RateSearchResult> FindRate(const RateSearchOptions& options,
                                          const std::function<absl::StatusOr<double>(double rate)>& p99_ttft_ms_at,
                                          const std::function<void(const RateProbe&)>& on_probe = {});

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_RATE_SEARCH_H_
