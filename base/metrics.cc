#include "base/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace strata::metrics {

uint64_t AtomicDouble::ToBits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

double AtomicDouble::FromBits(uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

void AtomicDouble::Add(double v) {
  uint64_t old = bits_.load(std::memory_order_relaxed);
  while (!bits_.compare_exchange_weak(old, ToBits(FromBits(old) + v), std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.Add(v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i) b.push_back(start + width * i);
  return b;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

namespace {

void AppendEscaped(std::string& out, const std::string& value) {
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

void AppendHeader(std::string& out, const std::string& name, const std::string& help, const std::string& type) {
  out += "# HELP " + name + " ";
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  out += "\n# TYPE " + name + " " + type + "\n";
}

void AppendSample(std::string& out, const std::string& name, const Labels& labels, double v,
                  const std::pair<std::string, std::string>* extra = nullptr) {
  out += name;
  out += FormatLabels(labels, extra);
  out += ' ';
  out += FormatValue(v);
  out += '\n';
}

}  // namespace

std::string FormatLabels(const Labels& labels, const std::pair<std::string, std::string>* extra) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::pair<std::string, std::string>& kv) {
    if (!first) out += ',';
    first = false;
    out += kv.first + "=\"";
    AppendEscaped(out, kv.second);
    out += '"';
  };
  for (const auto& kv : labels) add(kv);
  if (extra != nullptr) add(*extra);
  out += '}';
  return out;
}

template <>
void Family<Counter>::Serialize(std::string& out) const {
  AppendHeader(out, name_, help_, type_);
  MutexLock lock(&mu_);
  for (const auto& [labels, c] : children_) AppendSample(out, name_, labels, c->Value());
}

template <>
void Family<Gauge>::Serialize(std::string& out) const {
  AppendHeader(out, name_, help_, type_);
  MutexLock lock(&mu_);
  for (const auto& [labels, g] : children_) AppendSample(out, name_, labels, g->Value());
}

template <>
void Family<Histogram>::Serialize(std::string& out) const {
  AppendHeader(out, name_, help_, type_);
  MutexLock lock(&mu_);
  for (const auto& [labels, h] : children_) {
    // Read the count first: buckets and sum observed after it only make them larger,
    // never smaller than +Inf's bucket, which is printed as count.
    std::vector<uint64_t> cumulative = h->CumulativeCounts();
    for (size_t i = 0; i < h->bounds().size(); ++i) {
      std::pair<std::string, std::string> le{"le", FormatValue(h->bounds()[i])};
      AppendSample(out, name_ + "_bucket", labels, static_cast<double>(cumulative[i]), &le);
    }
    std::pair<std::string, std::string> inf{"le", "+Inf"};
    AppendSample(out, name_ + "_bucket", labels, static_cast<double>(cumulative.back()), &inf);
    AppendSample(out, name_ + "_sum", labels, h->Sum());
    AppendSample(out, name_ + "_count", labels, static_cast<double>(cumulative.back()));
  }
}

template <class M>
Family<M>& Registry::Add(const std::string& name, const std::string& help, const char* type,
                         std::function<std::unique_ptr<M>()> make) {
  MutexLock lock(&mu_);
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    if (it->second.second != type) {
      std::fprintf(stderr, "metric %s registered as %s and as %s\n", name.c_str(),
                   it->second.second.c_str(), type);
      std::abort();
    }
    return *static_cast<Family<M>*>(it->second.first);
  }
  auto family = std::make_unique<Family<M>>(name, help, type, std::move(make));
  Family<M>* raw = family.get();
  families_.push_back(std::move(family));
  by_name_[name] = {raw, type};
  return *raw;
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help) {
  return Add<Counter>(name, help, "counter", [] { return std::make_unique<Counter>(); });
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help) {
  return Add<Gauge>(name, help, "gauge", [] { return std::make_unique<Gauge>(); });
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> bounds) {
  return Add<Histogram>(name, help, "histogram",
                        [bounds] { return std::make_unique<Histogram>(bounds); });
}

void Registry::AddCollector(std::function<void()> collect) {
  MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Serialize() const {
  std::vector<std::function<void()>> collectors;
  std::vector<const FamilyBase*> families;
  {
    MutexLock lock(&mu_);
    collectors = collectors_;
    for (const auto& f : families_) families.push_back(f.get());
  }
  for (const auto& c : collectors) c();
  std::string out;
  for (const FamilyBase* f : families) f->Serialize(out);
  return out;
}

}  // namespace strata::metrics
