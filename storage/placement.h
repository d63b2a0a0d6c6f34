// Placement: which sessions leave a tier when room is needed, which are kept no matter
// what, and which are brought up from SSD ahead of time. One implementation, used by the
// live SessionStore and by the trace simulator (placement_sim.h).
//
// Policies:
//   scheduler-aware (default)  AttentionStore §3.3. The engine's waiting queue is a
//       look-ahead of the sessions about to run. Prefetch: the first
//       L_pw = C_host_free / S_kv sessions of the look-ahead are brought from SSD to host
//       before admission (S_kv: mean stored blocks per session, measured; C_host_free:
//       free host blocks plus those of host copies outside the look-ahead that are also
//       on SSD, which a prefetch may demote without loss — a host tier is always full). Eviction: a
//       queued session within L_ev = (C_host + C_ssd) / S_kv of the head never leaves the
//       store. Host→SSD demotion takes sessions outside the look-ahead first (least
//       recently used first), then gateway hints, then queued sessions farthest back first.
//       Gateway hints (CacheService.Prefetch) follow the queue in the look-ahead, with
//       lower priority; room for a prefetch is only ever taken from sessions outside the
//       look-ahead.
//   lru     least recently used leaves first; no look-ahead, no prefetch.
//   fifo    first stored leaves first; no look-ahead, no prefetch.
//   belady  the session used farthest in the future leaves first (needs the future: an
//           oracle the simulator supplies); no prefetch.
//
// Not thread-safe: the owner (SessionStore under its lock, or the simulator) serialises
// calls.
#ifndef STRATA_STORAGE_PLACEMENT_H_
#define STRATA_STORAGE_PLACEMENT_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata::storage {

enum class PlacementPolicy { kSchedulerAware, kLru, kFifo, kBelady };

// "scheduler-aware", "lru", "fifo", "belady"; InvalidArgument naming the choices otherwise.
absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(absl::string_view name);
const char* PlacementPolicyName(PlacementPolicy policy);

// Why room is being made: what a victim may be.
enum class RoomFor {
  kHost,          // a turn's save or an on-demand promotion: any host copy may go
  kHostPrefetch,  // a prefetch: only sessions outside the look-ahead may go
  kLeaveStore,    // a session leaves the store entirely (SSD full, or host-only eviction)
};

// A session that could be moved, as the policy sees it.
struct PlacementCandidate {
  absl::string_view key;    // the session's key (the store's map key); must outlive the call
  uint64_t last_use = 0;   // logical clock of its last access
  uint64_t inserted = 0;   // logical clock of when it was first stored
};

constexpr uint64_t kNeverUsedAgain = std::numeric_limits<uint64_t>::max();

class Placement {
 public:
  explicit Placement(PlacementPolicy policy) : policy_(policy) {}

  PlacementPolicy policy() const { return policy_; }

  // The engine's waiting queue, head first (replaces the previous one). Duplicates keep
  // their first position.
  void SetQueue(const std::vector<std::string>& queued);
  // A gateway hint that the session is about to come back. Hints are kept, most recent
  // first, until the session is used (Used) or `kMaxHints` newer hints push it out.
  void Hint(const std::string& key);
  // The session ran: its hint, if any, is spent.
  void Used(const std::string& key);
  // Belady's oracle: the logical time of the session's next use, or kNeverUsedAgain.
  void SetOracle(std::function<uint64_t(absl::string_view key)> next_use) { next_use_ = std::move(next_use); }

  // Capacities in blocks and the measured mean blocks per stored session; sets the
  // prefetch window L_pw = host_free / mean and the eviction window
  // L_ev = (host_capacity + ssd_capacity) / mean (both at least 1 while sessions exist).
  void SetCapacity(int64_t host_free_blocks, int64_t host_capacity_blocks, int64_t ssd_capacity_blocks,
                   double mean_session_blocks);

  // Orders `candidates` so that the first to leave comes first, and removes those that
  // must stay for this purpose (scheduler-aware: queued sessions within the eviction
  // window never leave the store; a prefetch takes room only from outside the look-ahead).
  void OrderVictims(std::vector<PlacementCandidate>& candidates, RoomFor purpose) const;

  // Whether the session may leave the store now (false only for scheduler-aware queued
  // sessions within the eviction window).
  bool MayLeaveStore(absl::string_view key) const;

  // The sessions to bring up to host now, nearest first: the first prefetch-window many
  // sessions of the look-ahead (queue, then hints) for which `needs_fetch` is true (held
  // only on SSD, not already in transit). Empty for every policy but scheduler-aware.
  std::vector<std::string> PrefetchOrder(const std::function<bool(const std::string&)>& needs_fetch) const;

  int64_t lookahead_length() const { return static_cast<int64_t>(queue_.size() + hints_.size()); }
  int64_t prefetch_window() const { return prefetch_window_; }
  int64_t eviction_window() const { return eviction_window_; }
  // Position in the queue (0 = head), or -1.
  int64_t QueuePosition(absl::string_view key) const;
  // Queued or hinted.
  bool InLookAhead(absl::string_view key) const { return QueuePosition(key) >= 0 || hints_.contains(key); }

  static constexpr size_t kMaxHints = 1024;

 private:
  const PlacementPolicy policy_;
  std::vector<std::string> queue_;
  absl::flat_hash_map<std::string, int64_t> queue_pos_;
  absl::flat_hash_map<std::string, uint64_t> hints_;  // session -> hint sequence (larger: more recent)
  uint64_t hint_seq_ = 0;
  std::function<uint64_t(absl::string_view)> next_use_;
  int64_t prefetch_window_ = 0;
  int64_t eviction_window_ = std::numeric_limits<int64_t>::max();
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_PLACEMENT_H_
