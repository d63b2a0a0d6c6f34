#include "engine/hbm_tier.h"

#include <algorithm>
#include <limits>

#include "base/log.h"

namespace strata::engine {
namespace {

constexpr int64_t kCpuDefaultBytes = int64_t{256} << 20;

int64_t CapacityBytes(const HbmTierOptions& options, const model::ModelBackend& model) {
  if (options.capacity_bytes >= 0) return options.capacity_bytes;
  const int64_t tokens = model.kv_capacity_tokens();
  if (tokens == std::numeric_limits<int64_t>::max()) return kCpuDefaultBytes;
  return tokens * model.kv_bytes_per_token();
}

}  // namespace

HbmTier::HbmTier(const HbmTierOptions& options, model::ModelBackend* model, metrics::Registry* registry)
    : model_(model), capacity_bytes_(CapacityBytes(options, *model)), placement_(options.placement) {
  if (registry != nullptr) {
    tier_bytes_ = &registry->AddGauge("strata_tier_bytes", "Bytes held in each tier.").WithLabels({{"tier", "hbm"}});
    tier_capacity_ = &registry->AddGauge("strata_tier_capacity_bytes", "Capacity of each tier (0: off).")
                          .WithLabels({{"tier", "hbm"}});
    tier_sessions_ =
        &registry->AddGauge("strata_sessions", "Sessions with KV held in each tier.").WithLabels({{"tier", "hbm"}});
  }
  Publish();
}

void HbmTier::Publish() {
  if (tier_bytes_ == nullptr) return;
  tier_bytes_->Set(static_cast<double>(bytes_));
  tier_capacity_->Set(static_cast<double>(capacity_bytes_));
  tier_sessions_->Set(static_cast<double>(resident_.size()));
}

void HbmTier::Keep(const storage::SessionKey& key, std::unique_ptr<model::SequenceState> seq,
                   std::vector<int32_t> tokens, int64_t base_tokens) {
  const std::string map_key = storage::SessionMapKey(key);
  Remove(map_key);
  if (!enabled() || seq == nullptr || static_cast<int64_t>(tokens.size()) <= base_tokens) {
    Publish();  // (its earlier turn's copy may have gone)
    return;
  }
  const int64_t n = static_cast<int64_t>(tokens.size()) - base_tokens;  // its own
  if (absl::Status s = model_->ResizeSequence(*seq, n); !s.ok()) {
    LOG(WARNING) << "a finished turn's KV could not be shrunk to stay in HBM: " << s;
    Publish();
    return;
  }
  Resident r;
  r.seq = std::move(seq);
  r.tokens = std::move(tokens);
  r.base_tokens = base_tokens;
  r.bytes = n * model_->kv_bytes_per_token();
  r.last_use = r.inserted = ++clock_;
  bytes_ += r.bytes;
  resident_.emplace(map_key, std::move(r));
  while (bytes_ > capacity_bytes_ && EvictOne()) {
  }
  Publish();
}

absl::StatusOr<std::optional<HbmTier::Taken>> HbmTier::Take(const storage::SessionKey& key,
                                                            absl::Span<const int32_t> prompt, int64_t max_tokens,
                                                            int64_t capacity, int64_t base_tokens) {
  const std::string map_key = storage::SessionMapKey(key);
  auto it = resident_.find(map_key);
  if (it == resident_.end()) return std::nullopt;
  const std::vector<int32_t>& held = it->second.tokens;
  const int64_t limit = std::min<int64_t>({static_cast<int64_t>(held.size()), static_cast<int64_t>(prompt.size()),
                                          max_tokens});
  int64_t match = 0;
  while (match < limit && held[static_cast<size_t>(match)] == prompt[static_cast<size_t>(match)]) ++match;
  if (match == 0 || it->second.base_tokens != base_tokens || (base_tokens > 0 && match <= base_tokens)) {
    Remove(map_key);
    Publish();
    return std::nullopt;
  }
  // Grow it to the turn's capacity, making room from the other resident sessions.
  it->second.last_use = ++clock_;
  Resident taken = std::move(it->second);
  resident_.erase(it);
  bytes_ -= taken.bytes;
  if (absl::Status grown = Resize(*taken.seq, capacity - base_tokens); !grown.ok()) {
    bytes_ += taken.bytes;
    resident_.emplace(map_key, std::move(taken));
    Publish();
    return grown;
  }
  Publish();
  return Taken{std::move(taken.seq), match};
}

absl::Status HbmTier::Resize(model::SequenceState& seq, int64_t capacity_tokens) {
  absl::Status resized;
  while (!(resized = model_->ResizeSequence(seq, capacity_tokens)).ok() && absl::IsResourceExhausted(resized) &&
         EvictOne()) {
  }
  return resized;
}

bool HbmTier::EvictOne() {
  if (resident_.empty()) return false;
  std::vector<storage::PlacementCandidate> candidates;
  candidates.reserve(resident_.size());
  for (const auto& [k, r] : resident_) candidates.push_back({k, r.last_use, r.inserted});
  // Any resident session may leave (its KV is on the host tier already); the policy
  // orders them: scheduler-aware sends queued sessions last, farthest back first.
  placement_.OrderVictims(candidates, storage::RoomFor::kHost);
  if (candidates.empty()) return false;
  Remove(std::string(candidates.front().key));
  Publish();
  return true;
}

void HbmTier::Drop(const storage::SessionKey& key) {
  Remove(storage::SessionMapKey(key));
  Publish();
}

bool HbmTier::Contains(const storage::SessionKey& key) const {
  return resident_.contains(storage::SessionMapKey(key));
}

void HbmTier::Remove(const std::string& map_key) {
  auto it = resident_.find(map_key);
  if (it == resident_.end()) return;
  bytes_ -= it->second.bytes;
  resident_.erase(it);
}

}  // namespace strata::engine
