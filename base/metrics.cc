#include "base/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>

#include "prometheus/text_serializer.h"

namespace strata::metrics {
namespace {

template <class M>
prometheus::detail::Builder<M> Build() {
  if constexpr (std::is_same_v<M, Counter>) return prometheus::BuildCounter();
  if constexpr (std::is_same_v<M, Gauge>) return prometheus::BuildGauge();
  if constexpr (std::is_same_v<M, Histogram>) return prometheus::BuildHistogram();
}

template <class M>
const char* TypeName() {
  if constexpr (std::is_same_v<M, Counter>) return "counter";
  if constexpr (std::is_same_v<M, Gauge>) return "gauge";
  return "histogram";
}

[[noreturn]] void Misuse(const std::string& name, const std::string& what) {
  std::fprintf(stderr, "metric %s: %s\n", name.c_str(), what.c_str());
  std::abort();
}

// The text format escapes a help text's backslashes and line feeds; TextSerializer (1.0.1)
// writes help verbatim, so a line feed in it would end the comment mid-sentence.
std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

template <class M>
Family<M>& Registry::Add(const std::string& name, const std::string& help, std::vector<double> bounds) {
  MutexLock lock(&mu_);
  if (auto it = families_.find(name); it != families_.end()) {
    auto* same = std::get_if<std::unique_ptr<Family<M>>>(&it->second);
    if (same == nullptr) Misuse(name, std::string("registered with another type and as ") + TypeName<M>());
    return **same;
  }
  prometheus::Family<M>* family = nullptr;
  try {
    // prometheus-cpp checks the name; its registry would also refuse another type.
    family = &Build<M>().Name(name).Help(help).Register(registry_);
  } catch (const std::invalid_argument& e) {
    Misuse(name, e.what());
  }
  auto owned = std::make_unique<Family<M>>(*family, std::move(bounds));
  Family<M>& out = *owned;
  order_.emplace(name, order_.size());
  families_.emplace(name, std::move(owned));
  return out;
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help) {
  return Add<Counter>(name, help, {});
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help) {
  return Add<Gauge>(name, help, {});
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> bounds) {
  if (std::adjacent_find(bounds.begin(), bounds.end(), std::greater_equal<double>()) != bounds.end()) {
    Misuse(name, "histogram bounds are not strictly increasing");
  }
  return Add<Histogram>(name, help, std::move(bounds));
}

void Registry::AddCollector(std::function<void()> collect) {
  MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::vector<prometheus::MetricFamily> Registry::Collect() const {
  std::vector<std::function<void()>> collectors;
  {
    MutexLock lock(&mu_);
    collectors = collectors_;
  }
  std::vector<prometheus::MetricFamily> families;
  {
    MutexLock lock(&collect_mu_);
    for (const auto& c : collectors) c();
    families = registry_.Collect();
  }
  std::map<std::string, size_t> order;
  {
    MutexLock lock(&mu_);
    order = order_;
  }
  // prometheus-cpp groups families by type and keeps a family's series in hash order;
  // registration order and sorted labels make the exposition stable scrape to scrape.
  std::sort(families.begin(), families.end(),
            [&order](const prometheus::MetricFamily& a, const prometheus::MetricFamily& b) {
              return order.at(a.name) < order.at(b.name);
            });
  for (prometheus::MetricFamily& f : families) {
    std::sort(f.metric.begin(), f.metric.end(),
              [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) { return a.label < b.label; });
  }
  return families;
}

std::string Registry::Serialize() const {
  std::vector<prometheus::MetricFamily> families = Collect();
  for (prometheus::MetricFamily& f : families) f.help = EscapeHelp(f.help);
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace strata::metrics
