#include "base/metrics_history.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/prometheus_text.h"
#include "nlohmann/json.hpp"

namespace strata::metrics {

absl::Status MetricsHistoryOptions::Validate() const {
  if (interval <= absl::ZeroDuration()) return absl::InvalidArgumentError("the sampling interval must be positive");
  if (max_points < 2 || max_points > 10000) {
    return absl::InvalidArgumentError(absl::StrCat("a history keeps 2..10000 points, not ", max_points));
  }
  return absl::OkStatus();
}

MetricsHistory::MetricsHistory(const Registry* registry, MetricsHistoryOptions options)
    : registry_(registry), options_(std::move(options)) {}

MetricsHistory::~MetricsHistory() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (sampler_.joinable()) sampler_.join();
}

void MetricsHistory::StartSampling() {
  sampler_ = std::thread([this] {
    for (;;) {
      Sample(absl::Now());
      MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; }, options_.interval)) {
        return;
      }
    }
  });
}

bool MetricsHistory::Kept(const std::string& key) const {
  std::string name = key.substr(0, key.find('{'));
  if (options_.names.contains(name)) return true;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (name.ends_with(suffix) && options_.names.contains(name.substr(0, name.size() - std::strlen(suffix)))) {
      return true;
    }
  }
  return false;
}

void MetricsHistory::Sample(absl::Time time) {
  // Outside the lock: the registry's collectors may take a while.
  auto samples = ParsePrometheusText(registry_->Serialize());
  if (!samples.ok()) {
    LOG(ERROR) << "metrics history: the exposition does not parse (" << samples.status().message()
               << "); this sample is skipped";
    return;
  }
  constexpr double kAbsent = std::numeric_limits<double>::quiet_NaN();
  MutexLock lock(&mu_);
  times_.push_back(time);
  for (auto& [key, values] : series_) {
    auto it = samples->find(key);
    values.push_back(it == samples->end() ? kAbsent : it->second);
  }
  for (const auto& [key, value] : *samples) {
    if (series_.contains(key) || !Kept(key)) continue;
    std::deque<double>& values = series_[key];
    values.assign(times_.size() - 1, kAbsent);
    values.push_back(value);
  }
  if (static_cast<int>(times_.size()) > options_.max_points) {
    times_.pop_front();
    for (auto it = series_.begin(); it != series_.end();) {
      it->second.pop_front();
      // A series absent at every time kept (its sample went away) goes too.
      bool absent = std::all_of(it->second.begin(), it->second.end(), [](double v) { return std::isnan(v); });
      it = absent ? series_.erase(it) : std::next(it);
    }
  }
}

std::string MetricsHistory::ToJson() const {
  nlohmann::json out;
  out["interval_seconds"] = absl::ToDoubleSeconds(options_.interval);
  nlohmann::json times = nlohmann::json::array();
  nlohmann::json series = nlohmann::json::object();
  {
    MutexLock lock(&mu_);
    for (absl::Time t : times_) times.push_back(absl::ToDoubleSeconds(t - absl::UnixEpoch()));
    for (const auto& [key, values] : series_) {
      nlohmann::json column = nlohmann::json::array();
      for (double v : values) column.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
      series[key] = std::move(column);
    }
  }
  out["times"] = std::move(times);
  out["series"] = std::move(series);
  return out.dump();
}

}  // namespace strata::metrics
