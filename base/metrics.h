// Prometheus metrics: strata's registry over prometheus-cpp's.
//
// The metric types are prometheus-cpp's (prometheus::Counter, Gauge, Histogram). Components
// own their metrics: they register families on a Registry at construction and keep
// references to the children they update. Counters and gauges are atomics; a histogram's
// Observe takes the histogram's own short lock. Family::WithLabels takes the family's lock
// (look children up once where it is hot).
//
// What strata adds to prometheus-cpp: families looked up by name (a second registration
// returns the first), collectors that refresh gauges and counters at scrape time, and a
// text exposition with families in registration order and series sorted by their labels.
#ifndef STRATA_BASE_METRICS_H_
#define STRATA_BASE_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "base/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace strata::metrics {

using Counter = prometheus::Counter;      // Increment(v): v < 0 is ignored (counters only go up)
using Gauge = prometheus::Gauge;          // Set, Increment, Decrement
using Histogram = prometheus::Histogram;  // Observe
// Label name -> value. A std::map: a series' labels are written sorted by name.
using Labels = prometheus::Labels;

// Bucket bounds start, start*factor, ... (count of them).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// The children of one metric name, keyed by their label values. References returned by
// WithLabels stay valid for the life of the registry.
template <class M>
class Family {
 public:
  // Made by Registry (the one way to get a Family).
  Family(prometheus::Family<M>& family, std::vector<double> bounds) : family_(family), bounds_(std::move(bounds)) {}
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // The child with `labels`, made (zero, or empty buckets) on first use. Thread-safe. A
  // label name that Prometheus does not accept is a programming error: prometheus-cpp
  // throws std::invalid_argument.
  M& WithLabels(const Labels& labels) {
    if constexpr (std::is_same_v<M, Histogram>) {
      return family_.Add(labels, bounds_);
    } else {
      return family_.Add(labels);
    }
  }
  const std::string& name() const { return family_.GetName(); }

 private:
  prometheus::Family<M>& family_;     // owned by the Registry's prometheus::Registry
  const std::vector<double> bounds_;  // a histogram's bucket bounds; empty otherwise
};

// Thread-safe. Registration is meant for start-up (it aborts on misuse, see below).
class Registry : public prometheus::Collectable {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family, or returns the one already registered under `name` (the help
  // and buckets of the first registration stay). A name registered with another type, or
  // one Prometheus does not accept, is a programming error and aborts. Histogram `bounds`
  // must be strictly increasing; +Inf is implied.
  Family<Counter>& AddCounter(const std::string& name, const std::string& help);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help);
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  // `collect` runs at the start of every Collect (and so Serialize), so owners can refresh
  // gauges from their own statistics. Collectors never run concurrently with each other
  // (two scrapes at once run them one after the other). It must not call Collect or
  // Serialize.
  void AddCollector(std::function<void()> collect);

  // Runs the collectors, then returns every family that has a series (a family without
  // one is left out, as prometheus-cpp does), in registration order, each family's series
  // sorted by their labels. Help text is as registered.
  std::vector<prometheus::MetricFamily> Collect() const override;

  // Collect() in the Prometheus text format 0.0.4 (prometheus::TextSerializer), help text
  // escaped as the format demands.
  std::string Serialize() const;

 private:
  using AnyFamily = std::variant<std::unique_ptr<Family<Counter>>, std::unique_ptr<Family<Gauge>>,
                                 std::unique_ptr<Family<Histogram>>>;
  template <class M>
  Family<M>& Add(const std::string& name, const std::string& help, std::vector<double> bounds);

  prometheus::Registry registry_;  // thread-safe itself
  mutable Mutex mu_;
  std::map<std::string, AnyFamily> families_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> order_ ABSL_GUARDED_BY(mu_);  // name -> registration index
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
  // Held while collectors run and the values are read: the collectors' read-modify-write
  // of counters (Value, then Increment by the difference) must not interleave.
  // Never held together with mu_.
  mutable Mutex collect_mu_;
};

// Raises `c` to `total`, a count kept elsewhere (a component's own statistics, mirrored
// at each scrape by a collector); a total below the counter's value changes nothing.
inline void SyncCounter(Counter& c, double total) {
  const double delta = total - c.Value();
  if (delta > 0) c.Increment(delta);
}

}  // namespace strata::metrics

#endif  // STRATA_BASE_METRICS_H_
