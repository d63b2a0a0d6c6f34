// Prometheus metrics: counters, gauges and histograms in labelled families, written in
// the Prometheus text exposition format 0.0.4.
//
// Components own their metrics: they register families on a Registry at construction
// and keep references to the children they update. All metric types are thread-safe
// and lock-free to update; Family::WithLabels takes a lock (look children up once).
#ifndef STRATA_BASE_METRICS_H_
#define STRATA_BASE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace strata::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// A double updated atomically (compare-and-swap on its bits).
class AtomicDouble {
 public:
  void Add(double v);
  void Set(double v) { bits_.store(ToBits(v), std::memory_order_relaxed); }
  double Get() const { return FromBits(bits_.load(std::memory_order_relaxed)); }

 private:
  static uint64_t ToBits(double v);
  static double FromBits(uint64_t b);
  std::atomic<uint64_t> bits_{0};  // bits of 0.0
};

class Counter {
 public:
  // `v` must be >= 0: counters only go up.
  void Increment(double v = 1) { value_.Add(v); }
  double Value() const { return value_.Get(); }

 private:
  AtomicDouble value_;
};

class Gauge {
 public:
  void Set(double v) { value_.Set(v); }
  void Add(double v) { value_.Add(v); }
  double Value() const { return value_.Get(); }

 private:
  AtomicDouble value_;
};

class Histogram {
 public:
  // `bounds` are the upper bounds of the buckets, increasing; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bound and +Inf last; sum; count.
  std::vector<uint64_t> CumulativeCounts() const;
  double Sum() const { return sum_.Get(); }
  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (not cumulative), +Inf last
  AtomicDouble sum_;
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds start, start*factor, ... (count of them).
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bucket bounds start, start+width, ... (count of them).
std::vector<double> LinearBuckets(double start, double width, int count);

class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  virtual void Serialize(std::string& out) const = 0;
};

// Children of one metric name, keyed by their label values. References returned by
// WithLabels stay valid for the life of the registry.
template <class M>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, std::string type, std::function<std::unique_ptr<M>()> make)
      : name_(std::move(name)), help_(std::move(help)), type_(std::move(type)), make_(std::move(make)) {}

  M& WithLabels(const Labels& labels) {
    MutexLock lock(&mu_);
    auto& slot = children_[labels];
    if (slot == nullptr) slot = make_();
    return *slot;
  }
  void Serialize(std::string& out) const override;
  const std::string& name() const { return name_; }

 private:
  const std::string name_, help_, type_;
  const std::function<std::unique_ptr<M>()> make_;
  mutable Mutex mu_;
  std::map<Labels, std::unique_ptr<M>> children_ ABSL_GUARDED_BY(mu_);
};

template <>
void Family<Counter>::Serialize(std::string& out) const;
template <>
void Family<Gauge>::Serialize(std::string& out) const;
template <>
void Family<Histogram>::Serialize(std::string& out) const;

class Registry {
 public:
  // Registers a family, or returns the one already registered under `name` (the help
  // and buckets of the first registration stay). A name registered with another type is
  // a programming error and aborts.
  Family<Counter>& AddCounter(const std::string& name, const std::string& help);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help);
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<double> bounds);
  // `collect` runs at the start of every Serialize, so owners can refresh gauges from
  // their own statistics. It must not call Serialize.
  void AddCollector(std::function<void()> collect);

  // The whole registry in the text format, families in registration order.
  std::string Serialize() const;

 private:
  template <class M>
  Family<M>& Add(const std::string& name, const std::string& help, const char* type,
                 std::function<std::unique_ptr<M>()> make);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<FamilyBase*, std::string>> by_name_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Text-format helpers (exposed for tests).
std::string FormatValue(double v);
std::string FormatLabels(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr);

}  // namespace strata::metrics

#endif  // STRATA_BASE_METRICS_H_
