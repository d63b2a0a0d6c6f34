// SessionStore: each session's KV cache, kept across turns, in fixed-size chunks.
//
// A session is identified by (tenant, session_id); nothing is visible across tenants. For
// each session the store keeps the token IDs whose KV it holds (to match prefixes and to
// recompute) and the list of chunks holding that KV, position-free and layer-major (see
// chunk_format.h). The session is the unit of eviction: when room is needed, whole
// sessions leave, least recently used first.
//
// Thread-safety: every method may be called from any thread. Read() and Save() run the
// caller's callback under the store's lock; callbacks must only copy bytes.
#ifndef STRATA_STORAGE_SESSION_STORE_H_
#define STRATA_STORAGE_SESSION_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "absl/types/span.h"
#include "storage/chunk_format.h"
#include "storage/host_tier.h"

namespace strata::storage {

enum class Tier { kNone = 0, kHbm = 1, kHost = 2, kSsd = 3 };
const char* TierName(Tier tier);  // "none", "hbm", "host", "ssd"

struct SessionKey {
  std::string tenant;
  std::string session_id;
};

struct SessionStoreOptions {
  int64_t host_capacity_bytes = int64_t{1} << 30;
  ChunkLayout layout;
  uint64_t model_fingerprint = 0;

  absl::Status Validate() const;
};

struct SessionInfo {
  std::string session_id;
  int64_t cached_tokens = 0;
  int64_t bytes = 0;
  int chunks = 0;
  Tier tier = Tier::kNone;
  int64_t last_access_unix_ms = 0;
};

struct PrefixMatch {
  int64_t tokens = 0;  // leading tokens whose KV the store holds
  Tier tier = Tier::kNone;
};

// Counters since start (monotonic) and occupancy (current).
struct SessionStoreStats {
  int64_t lookups = 0;
  int64_t hits = 0;            // lookups that matched at least one token
  int64_t hit_tokens = 0;      // tokens matched by those lookups
  int64_t evictions = 0;       // sessions evicted for room
  int64_t save_rejected = 0;   // saves that did not fit even after eviction
  int64_t corrupt_chunks = 0;  // chunks that failed verification on read
  int64_t host_capacity_bytes = 0;
  int64_t host_used_bytes = 0;
  int64_t sessions = 0;
};

class SessionStore {
 public:
  // Fills `fill`'s payload span with the KV of tokens [token_begin, token_begin + count)
  // laid out as chunk_format.h says (row of token_begin + i at RowOffset(l, kv, i)).
  using FillFn = absl::FunctionRef<void(int64_t token_begin, int count, absl::Span<std::byte>)>;
  // Receives a verified chunk's payload holding tokens [token_begin, token_begin + count).
  using VisitFn =
      absl::FunctionRef<void(int64_t token_begin, int count, absl::Span<const std::byte>)>;

  // Returns InvalidArgument when the options do not validate.
  static absl::StatusOr<std::unique_ptr<SessionStore>> Create(const SessionStoreOptions& options);

  // The longest prefix of `tokens` whose KV is stored for `key`, capped at `max_tokens`.
  // Counts as one lookup (a hit when it matched anything) and refreshes the session's
  // last access.
  PrefixMatch Match(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t max_tokens);

  // Delivers the KV of the first `tokens` tokens of the session to `visit`, chunk by
  // chunk, in order. Each chunk is verified first; at the first chunk that fails, the
  // session is truncated to the tokens before it (the bad chunk is never served) and
  // the count delivered so far is returned. Returns NotFound when the session is gone.
  absl::StatusOr<int64_t> Read(const SessionKey& key, int64_t tokens, VisitFn visit);

  // Stores the session as `tokens` (all tokens whose KV the caller holds). Chunks that
  // cover only tokens [0, keep_tokens) are kept as they are (the caller guarantees those
  // tokens equal the stored ones); every later chunk is written anew through `fill`.
  // Other sessions are evicted (least recently used first) to make room. Returns
  // ResourceExhausted, with the session dropped, when it cannot fit even in an empty
  // tier; InvalidArgument when keep_tokens exceeds what is stored.
  absl::Status Save(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t keep_tokens,
                    FillFn fill);

  // NotFound when the tenant has no such session.
  absl::StatusOr<SessionInfo> Get(const SessionKey& key) const;
  absl::Status Drop(const SessionKey& key);
  std::vector<SessionInfo> List(const std::string& tenant) const;
  SessionStoreStats Stats() const;

  const ChunkLayout& layout() const { return options_.layout; }

 private:
  struct Session {
    std::string tenant;
    std::string session_id;
    std::vector<int32_t> tokens;   // tokens whose KV the chunks hold
    std::vector<uint32_t> blocks;  // host tier block of each chunk
    uint64_t last_use = 0;         // logical clock for LRU
    int64_t last_access_unix_ms = 0;
  };

  SessionStore(const SessionStoreOptions& options, std::unique_ptr<HostTier> host);
  static std::string MapKey(const SessionKey& key);
  SessionInfo InfoLocked(const Session& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeBlocksLocked(Session& s, size_t keep_chunks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts least recently used sessions other than `keep` until `blocks` are free.
  bool MakeRoomLocked(int64_t blocks, const Session* keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionStoreOptions options_;
  mutable Mutex mu_;
  std::unique_ptr<HostTier> host_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  SessionStoreStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_STORE_H_
