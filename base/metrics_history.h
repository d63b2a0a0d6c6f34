// MetricsHistory: the last minutes of chosen metrics, sampled from a Registry at a fixed
// interval, so that a status page can plot them when no Prometheus keeps them.
//
// A sample is the registry's exposition (what a scrape of /metrics gets) read back with
// ParsePrometheusText, so the history holds exactly the numbers /metrics had then.
#ifndef STRATA_BASE_METRICS_HISTORY_H_
#define STRATA_BASE_METRICS_HISTORY_H_

#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/metrics.h"
#include "base/mutex.h"

namespace strata::metrics {

struct MetricsHistoryOptions {
  absl::Duration interval = absl::Seconds(5);
  int max_points = 180;  // 15 minutes at 5 s; the oldest point goes when a sample passes it
  // The metric names whose samples are kept; a histogram's name keeps its _bucket, _sum and
  // _count samples. Every other sample is left out.
  std::set<std::string> names;

  // InvalidArgument, saying which, unless interval > 0 and max_points is in 2..10000.
  absl::Status Validate() const;
};

class MetricsHistory {
 public:
  // Samples nothing until Sample() or StartSampling(). `registry` must outlive this.
  // `options` must validate.
  MetricsHistory(const Registry* registry, MetricsHistoryOptions options);
  // Stops the sampling thread, if any (waits for a sample in progress).
  ~MetricsHistory();
  MetricsHistory(const MetricsHistory&) = delete;
  MetricsHistory& operator=(const MetricsHistory&) = delete;

  // Starts a thread that calls Sample(absl::Now()) at once and then every interval until
  // this is destroyed. Call at most once.
  void StartSampling();

  // Serializes the registry (its collectors run) and appends the kept samples as the
  // point at `time`. A sample that does not parse leaves the history as it was (logged).
  // Thread-safe.
  void Sample(absl::Time time);

  // The history as a JSON object:
  //   {"interval_seconds": 5, "times": [unix seconds, oldest first],
  //    "series": {"<key>": [value or null, one per time], ...}}
  // Keys as ParsePrometheusText makes them (`name{label="value",...}`); null where the
  // sample was not exported at that time. Thread-safe.
  std::string ToJson() const;

 private:
  bool Kept(const std::string& key) const;

  const Registry* const registry_;
  const MetricsHistoryOptions options_;
  mutable Mutex mu_;
  std::deque<absl::Time> times_ ABSL_GUARDED_BY(mu_);
  // One value per time (NaN: absent then).
  std::map<std::string, std::deque<double>> series_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sampler_;
};

}  // namespace strata::metrics

#endif  // STRATA_BASE_METRICS_HISTORY_H_
