// HbmTier: the sessions whose KV stays in the backend's KV memory (the GPU's paged pool,
// or the CPU backend's own memory) after their turn ended, so that a session that comes
// back reuses it with no copy. The fastest tier of the session cache.
//
// A finished turn's sequence is kept (shrunk to the tokens it holds) after its KV was
// saved to the host tier; leaving HBM is then free. It leaves when the memory is needed:
// by a new turn's sequence (EvictOne, in the placement policy's order: scheduler-aware
// keeps queued sessions longest, LRU and FIFO as configured), when the tier passes its
// capacity, or when its session is found gone from the store (dropped, expired) or no
// longer matching the conversation. A returning turn takes the sequence out (Take), grows
// it to the turn's capacity and computes only what follows the matched prefix.
//
// Engine thread only (not thread-safe); the gauges it sets are read by /metrics scrapes.
#ifndef STRATA_ENGINE_HBM_TIER_H_
#define STRATA_ENGINE_HBM_TIER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/metrics.h"
#include "model/model_backend.h"
#include "storage/placement.h"
#include "storage/session_key.h"

namespace strata::engine {

struct HbmTierOptions {
  // Most bytes of KV memory resident sessions may hold. -1: the whole KV memory when the
  // backend's is bounded (a GPU pool: resident sessions give way to running turns), else
  // 256 MiB; 0: the tier is off.
  int64_t capacity_bytes = -1;
  storage::PlacementPolicy placement = storage::PlacementPolicy::kSchedulerAware;
};

class HbmTier {
 public:
  // `model` must outlive the tier; `registry` may be null.
  HbmTier(const HbmTierOptions& options, model::ModelBackend* model, metrics::Registry* registry);

  bool enabled() const { return capacity_bytes_ > 0; }

  // Keeps `seq`, which holds the KV of `tokens`, as the session's resident copy (replacing
  // any older one), shrunk to those tokens; then evicts, in policy order, until the tier
  // is within its capacity (the new session may be the one to go). No-op when off. A
  // sequence on a shared prefix (model::ModelBackend::NewSequenceOnPrefix) of
  // `base_tokens` tokens holds only the tokens after them (and counts only those bytes).
  void Keep(const storage::SessionKey& key, std::unique_ptr<model::SequenceState> seq, std::vector<int32_t> tokens,
            int64_t base_tokens = 0);

  struct Taken {
    std::unique_ptr<model::SequenceState> seq;  // grown to the requested capacity
    int64_t tokens = 0;                          // leading prompt tokens whose KV it holds
  };
  // The session's resident sequence when it shares a non-empty prefix with `prompt`
  // (capped at `max_tokens`), grown to `capacity` tokens, taken out of the tier. nullopt
  // when there is none (a resident copy that shares nothing, or is on another shared prefix
  // length than `base_tokens`, or shares no more than that prefix, is dropped);
  // ResourceExhausted
  // when growing it needs memory that evicting every other resident session did not give
  // (the copy stays resident).
  absl::StatusOr<std::optional<Taken>> Take(const storage::SessionKey& key, absl::Span<const int32_t> prompt,
                                            int64_t max_tokens, int64_t capacity, int64_t base_tokens = 0);

  // Frees the resident session that leaves first under the policy. False when none is left.
  bool EvictOne();
  // Resizes `seq` (not a resident one) to `capacity_tokens`, evicting resident sessions in
  // policy order while the memory is short: ResourceExhausted once none is left to evict.
  absl::Status Resize(model::SequenceState& seq, int64_t capacity_tokens);
  // Drops the session's resident copy, if any.
  void Drop(const storage::SessionKey& key);
  bool Contains(const storage::SessionKey& key) const;
  // The engine's waiting queue, head first, as map keys (storage::SessionMapKey).
  void SetQueue(const std::vector<std::string>& queued) { placement_.SetQueue(queued); }

  int64_t bytes() const { return bytes_; }
  int64_t sessions() const { return static_cast<int64_t>(resident_.size()); }
  int64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct Resident {
    std::unique_ptr<model::SequenceState> seq;
    std::vector<int32_t> tokens;
    int64_t base_tokens = 0;
    int64_t bytes = 0;
    uint64_t last_use = 0;
    uint64_t inserted = 0;
  };
  void Remove(const std::string& map_key);
  void Publish();

  model::ModelBackend* model_;
  int64_t capacity_bytes_;
  storage::Placement placement_;
  absl::flat_hash_map<std::string, Resident> resident_;
  int64_t bytes_ = 0;
  uint64_t clock_ = 0;
  metrics::Gauge* tier_bytes_ = nullptr;
  metrics::Gauge* tier_capacity_ = nullptr;
  metrics::Gauge* tier_sessions_ = nullptr;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_HBM_TIER_H_
