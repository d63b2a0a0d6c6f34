#include "server/bench/rate_search.h"

#include <algorithm>
#include <cmath>

namespace strata::server::bench {

absl::Status RateSearchOptions::Validate() const {
  if (!(min_rate > 0) || !std::isfinite(min_rate)) return absl::InvalidArgumentError("min_rate must be > 0");
  if (!(start_rate > min_rate) || !std::isfinite(start_rate)) {
    return absl::InvalidArgumentError("rate (the first probe) must be > the smallest rate searched");
  }
  if (!(slo_ttft_ms > 0)) return absl::InvalidArgumentError("slo_ttft_ms must be > 0");
  if (max_probes < 2) return absl::InvalidArgumentError("find_rate_probes must be >= 2");
  return absl::OkStatus();
}

absl::StatusOr<RateSearchResult> FindRate(const RateSearchOptions& options,
                                          const std::function<absl::StatusOr<double>(double rate)>& p99_ttft_ms_at,
                                          const std::function<void(const RateProbe&)>& on_probe) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  RateSearchResult result;
  auto probe = [&](double rate) -> absl::StatusOr<bool> {
    absl::StatusOr<double> p99 = p99_ttft_ms_at(rate);
    if (!p99.ok()) return p99.status();
    RateProbe p{rate, *p99, *p99 <= options.slo_ttft_ms};
    result.probes.push_back(p);
    if (on_probe) on_probe(p);
    if (p.passed) result.best_rate = std::max(result.best_rate, rate);
    return p.passed;
  };
  // Bracket: lo passes, hi fails.
  double lo = 0, hi = 0;
  absl::StatusOr<bool> passed = probe(options.start_rate);
  if (!passed.ok()) return passed.status();
  if (*passed) {
    lo = options.start_rate;
    while (hi == 0 && static_cast<int>(result.probes.size()) < options.max_probes) {
      passed = probe(lo * 2);
      if (!passed.ok()) return passed.status();
      if (*passed) lo *= 2; else hi = lo * 2;
    }
  } else {
    hi = options.start_rate;
    while (lo == 0 && static_cast<int>(result.probes.size()) < options.max_probes && hi / 2 >= options.min_rate) {
      passed = probe(hi / 2);
      if (!passed.ok()) return passed.status();
      if (*passed) lo = hi / 2; else hi /= 2;
    }
  }
  if (lo == 0 || hi == 0) return result;  // never passed, or never failed within the probes
  // Bisect.
  while (static_cast<int>(result.probes.size()) < options.max_probes) {
    const double mid = (lo + hi) / 2;
    passed = probe(mid);
    if (!passed.ok()) return passed.status();
    if (*passed) lo = mid; else hi = mid;
  }
  return result;
}

}  // namespace strata::server::bench
