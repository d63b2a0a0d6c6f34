#include "storage/placement.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace strata::storage {

absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(absl::string_view name) {
  if (name == "scheduler-aware") return PlacementPolicy::kSchedulerAware;
  if (name == "lru") return PlacementPolicy::kLru;
  if (name == "fifo") return PlacementPolicy::kFifo;
  if (name == "belady") return PlacementPolicy::kBelady;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown placement policy '", name, "': use scheduler-aware, lru, fifo or belady"));
}

const char* PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kSchedulerAware:
      return "scheduler-aware";
    case PlacementPolicy::kLru:
      return "lru";
    case PlacementPolicy::kFifo:
      return "fifo";
    case PlacementPolicy::kBelady:
      return "belady";
  }
  return "?";
}

void Placement::SetQueue(const std::vector<std::string>& queued) {
  queue_.clear();
  queue_pos_.clear();
  for (const std::string& key : queued) {
    if (queue_pos_.emplace(key, static_cast<int64_t>(queue_.size())).second) queue_.push_back(key);
  }
}

void Placement::Hint(const std::string& key) {
  hints_[key] = ++hint_seq_;
  if (hints_.size() > kMaxHints) {
    // Drop the oldest hint.
    auto oldest = hints_.begin();
    for (auto it = hints_.begin(); it != hints_.end(); ++it) {
      if (it->second < oldest->second) oldest = it;
    }
    hints_.erase(oldest);
  }
}

void Placement::Used(const std::string& key) { hints_.erase(key); }

void Placement::SetCapacity(int64_t host_free_blocks, int64_t host_capacity_blocks, int64_t ssd_capacity_blocks,
                            double mean_session_blocks) {
  if (!(mean_session_blocks > 0)) {
    // Nothing stored yet: everything fits.
    prefetch_window_ = std::numeric_limits<int64_t>::max();
    eviction_window_ = std::numeric_limits<int64_t>::max();
    return;
  }
  prefetch_window_ = std::max<int64_t>(
      0, static_cast<int64_t>(std::floor(static_cast<double>(host_free_blocks) / mean_session_blocks)));
  eviction_window_ = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(static_cast<double>(host_capacity_blocks + ssd_capacity_blocks) /
                                         mean_session_blocks)));
}

int64_t Placement::QueuePosition(absl::string_view key) const {
  auto it = queue_pos_.find(key);
  return it == queue_pos_.end() ? -1 : it->second;
}

bool Placement::MayLeaveStore(absl::string_view key) const {
  if (policy_ != PlacementPolicy::kSchedulerAware) return true;
  const int64_t pos = QueuePosition(key);
  return pos < 0 || pos >= eviction_window_;
}

void Placement::OrderVictims(std::vector<PlacementCandidate>& candidates, RoomFor purpose) const {
  switch (policy_) {
    case PlacementPolicy::kLru:
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const PlacementCandidate& a, const PlacementCandidate& b) { return a.last_use < b.last_use; });
      return;
    case PlacementPolicy::kFifo:
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const PlacementCandidate& a, const PlacementCandidate& b) { return a.inserted < b.inserted; });
      return;
    case PlacementPolicy::kBelady: {
      // Farthest next use first; ties (e.g. never used again) by least recent use.
      std::vector<std::pair<uint64_t, size_t>> order;
      for (size_t i = 0; i < candidates.size(); ++i) {
        order.emplace_back(next_use_ ? next_use_(candidates[i].key) : kNeverUsedAgain, i);
      }
      std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
        if (a.first != b.first) return a.first > b.first;
        return candidates[a.second].last_use < candidates[b.second].last_use;
      });
      std::vector<PlacementCandidate> sorted;
      for (const auto& [next, i] : order) sorted.push_back(candidates[i]);
      candidates = std::move(sorted);
      return;
    }
    case PlacementPolicy::kSchedulerAware:
      break;
  }
  // Scheduler-aware: (class, order within the class), ascending.
  //   0: outside the look-ahead, least recently used first;
  //   1: hinted by the gateway, oldest hint first;
  //   2: queued, farthest from the head first.
  struct Ranked {
    int cls;
    uint64_t order;
    PlacementCandidate c;
  };
  std::vector<Ranked> ranked;
  ranked.reserve(candidates.size());
  for (const PlacementCandidate& c : candidates) {
    const int64_t pos = QueuePosition(c.key);
    if (pos >= 0) {
      if (purpose == RoomFor::kHostPrefetch) continue;
      if (purpose == RoomFor::kLeaveStore && pos < eviction_window_) continue;
      ranked.push_back({2, std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(pos), c});
      continue;
    }
    auto hint = hints_.find(c.key);
    if (hint != hints_.end()) {
      if (purpose == RoomFor::kHostPrefetch) continue;
      ranked.push_back({1, hint->second, c});
      continue;
    }
    ranked.push_back({0, c.last_use, c});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    return std::tie(a.cls, a.order) < std::tie(b.cls, b.order);
  });
  candidates.clear();
  for (const Ranked& r : ranked) candidates.push_back(r.c);
}

std::vector<std::string> Placement::PrefetchOrder(const std::function<bool(const std::string&)>& needs_fetch) const {
  std::vector<std::string> out;
  if (policy_ != PlacementPolicy::kSchedulerAware) return out;
  const size_t window = static_cast<size_t>(std::max<int64_t>(prefetch_window_, 0));
  for (const std::string& key : queue_) {
    if (out.size() >= window) return out;
    if (needs_fetch(key)) out.push_back(key);
  }
  std::vector<std::pair<uint64_t, const std::string*>> hinted;
  for (const auto& [key, seq] : hints_) {
    if (!queue_pos_.contains(key)) hinted.emplace_back(seq, &key);
  }
  std::sort(hinted.begin(), hinted.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [seq, key] : hinted) {
    if (out.size() >= window) break;
    if (needs_fetch(*key)) out.push_back(*key);
  }
  return out;
}

}  // namespace strata::storage
