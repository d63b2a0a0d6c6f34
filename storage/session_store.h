// SessionStore: each session's KV cache, kept across turns, in fixed-size chunks, in a
// host-memory tier and (optionally) an SSD tier with a RocksDB index.
//
// A session is identified by (tenant, session_id); nothing is visible across tenants. For
// each session the store keeps the token IDs whose KV it holds (to match prefixes and to
// recompute) and the chunks holding that KV, position-free and layer-major (see
// chunk_format.h). The session is the unit of eviction and of movement.
//
// Tiers. Save() writes a session's chunks to the host tier. With an SSD tier, every save
// is then written back asynchronously: the chunks go to the SSD files (O_DIRECT, from
// the registered host buffers), the files are synced, and only then the session's index
// record is committed (RocksDB, synced). From that moment the session is *persisted*:
// it survives a crash or restart (Create() recovers it) and its host copy may be dropped
// under pressure (demotion); a later Read() promotes it back. A session's bytes are
// always in a place the in-memory state names; SSD blocks an index record names are
// never reused until a newer record has replaced it or the record is deleted.
//
// Verification, where corruption can enter (chunk_format.h). A chunk's payload checksum
// is checked in full where its bytes cross the disk: when a session is promoted from SSD
// (which is also how a session recovered at restart is first read: recovery reads only
// the index, and the first promotion checks every chunk against the record's checksums),
// and by the write-back before a chunk is written to SSD. A chunk served from host memory
// (Read(), Lease()) has only its header checked: magic, version, layout, fingerprint,
// header checksum and token count, with no pass over the payload. A chunk that fails a
// check is a miss: never served, never persisted; the session is cut before it, the chunk
// counted in corrupt_chunks and logged. (A payload damaged in host memory after it was
// sealed is caught when it next heads for the disk; one that is never written to SSD is
// not checked.)
//
// Sealing. Save() writes each new chunk's header without its payload checksum ("unsealed",
// no pass over the payload on the caller's thread). The write-back computes the checksum
// (on its own thread, outside the store's lock), records it in the header and in the
// session (the checksums the index record commits) and only then writes the chunk to SSD.
// Without an SSD tier no payload is ever hashed.
//
// Tenant quotas (tenant_quota.h). A tenant may be held to a number of bytes in each tier:
// room within its quota is made among its own sessions only, never another tenant's.
//
// Faults. An SSD write error (ENOSPC, EIO) switches the store to host-only caching
// (degraded(), logged once) and nothing is lost that was acknowledged as persisted. An
// index found damaged, behind, or missing while the SSD data file holds chunks is rebuilt
// at start from the chunks' own descriptors (index_rebuild.h says which versions come
// back).
//
// Thread-safety: every method may be called from any thread. Save() runs the caller's
// `fill` under the store's lock; it must only copy bytes. Lease() hands out pinned chunk
// payloads that the caller reads with no lock held, and Read() runs its `visit` that way
// too (on a lease). Promote() moves a session from SSD to host without blocking anyone;
// Lease() and Read() of a session held only on SSD promote it and block their caller
// (only) on those reads, so the engine promotes before admission; Flush() blocks until
// the session is persisted. Nothing else waits on the disk.
//
// This header is the contract; the machinery is SessionStoreImpl (session_store_impl.h),
// which only storage/ includes.
#ifndef STRATA_STORAGE_SESSION_STORE_H_
#define STRATA_STORAGE_SESSION_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "storage/chunk_format.h"
#include "storage/placement.h"
#include "storage/session_key.h"
#include "storage/tenant_quota.h"

namespace strata::storage {

struct SessionStoreOptions {
  int64_t host_capacity_bytes = int64_t{1} << 30;
  ChunkLayout layout;
  uint64_t model_fingerprint = 0;
  // SSD tier: off when ssd_dirs is empty. One preallocated file per directory.
  std::vector<std::string> ssd_dirs;
  int64_t ssd_capacity_bytes_per_dir = 0;
  int ssd_queue_depth = 64;
  // How fast the SSD tier reads, known before the first promotion (the engine's
  // fetch-or-recompute rule needs it for the first SSD hit): an assumed speed in bytes
  // per second, or, when 0, measured at start by reading back ssd_probe_bytes written to
  // free blocks (ssd_probe.h). Promotions refine it. With neither, the first promotion
  // measures it and SSD hits before that are loaded.
  double ssd_read_bytes_per_second = 0;
  int64_t ssd_probe_bytes = int64_t{64} << 20;
  // Directory of the RocksDB index; required with an SSD tier.
  std::string index_dir;
  // Crash tests only: journal every SSD and index write's durability here, so that
  // ApplyPowerCut() (storage/write_journal.h) can take back what a power cut would.
  std::string power_cut_journal_dir;
  // Sessions not used for this long are dropped from every tier.
  absl::Duration ttl = absl::Hours(24);
  // Lock the host arena in memory (see HostTier::Create).
  bool lock_host_memory = false;
  // Which sessions leave a tier, which stay, what is prefetched (placement.h).
  PlacementPolicy placement = PlacementPolicy::kSchedulerAware;
  // Per-tenant quotas of host and SSD bytes (tenant_quota.h): `tenant_quota` for every
  // tenant, `tenant_quotas` in its place for the tenants it names. Each quota is 0 (none)
  // or holds at least one chunk (layout.BlockBytes()); it is counted in whole chunks.
  TenantQuota tenant_quota;
  std::map<std::string, TenantQuota> tenant_quotas;

  // The quotas of `tenant`.
  const TenantQuota& QuotaOf(const std::string& tenant) const;
  absl::Status Validate() const;
};

struct SessionInfo {
  std::string session_id;
  int64_t cached_tokens = 0;
  int64_t bytes = 0;  // bytes of one copy of the session's chunks
  int chunks = 0;
  Tier tier = Tier::kNone;  // fastest tier holding the session
  int64_t last_access_unix_ms = 0;
  bool persisted = false;
  std::string base;  // what its KV follows (Save's `base`); "" for a session of its own
};

struct PrefixMatch {
  int64_t tokens = 0;  // leading tokens whose KV the store holds
  Tier tier = Tier::kNone;
  // Where that KV lies in the stored session: tokens [0, kept) are its first tokens, and
  // tokens [kept, tokens) its tokens [kept + gap, gap + tokens) (a conversation cut after
  // its first `kept` tokens: MatchAcrossCut). A plain prefix has kept == tokens, gap 0.
  int64_t kept = 0;
  int64_t gap = 0;
};

// Counters since start (monotonic) and occupancy (current).
struct SessionStoreStats {
  int64_t lookups = 0;
  int64_t hits = 0;            // lookups that matched at least one token (or whose turn
                               // reused KV held outside the store: CountReuse)
  int64_t hit_tokens = 0;      // tokens those lookups' turns reused
  int64_t evictions = 0;       // sessions that left the store for room (the four reasons below)
  int64_t evictions_host_full = 0;  // not yet on SSD, pushed out of a full host tier
  int64_t evictions_ssd_full = 0;   // held only on SSD, pushed out of a full SSD tier
  int64_t evictions_host_quota = 0;  // not yet on SSD, pushed out for its tenant's host quota
  int64_t evictions_ssd_quota = 0;   // held only on SSD, pushed out for its tenant's SSD quota
  // Tenant quotas (tenant_quota.h): host copies dropped (demoted, or evicted as above) and
  // SSD copies deleted to keep a tenant within its quota; saves and promotions (host) and
  // write-backs (SSD) refused because the tenant's own sessions could not make the room.
  int64_t quota_evictions_host = 0;
  int64_t quota_evictions_ssd = 0;
  int64_t quota_refused_host = 0;
  int64_t quota_refused_ssd = 0;
  // TenantStats only: the tenant's quotas in bytes (0: none).
  int64_t host_quota_bytes = 0;
  int64_t ssd_quota_bytes = 0;
  int64_t demotions = 0;       // host copies dropped because an SSD copy exists
  int64_t promotions = 0;      // sessions read back from SSD into host memory
  int64_t promotion_failures = 0;
  int64_t prefetches = 0;          // promotions started from the look-ahead
  int64_t prefetch_in_time = 0;    // prefetched sessions on host when their turn came
  int64_t prefetch_late = 0;       // turns that came while their prefetch was in flight
  int64_t prefetch_wasted = 0;     // prefetched host copies that left before use
  int64_t lookahead_sessions = 0;  // queued + hinted sessions the policy sees now
  int64_t persist_queue = 0;       // write-backs waiting for the SSD (sessions saved, not yet persisted)
  int64_t save_rejected = 0;   // saves that did not fit even after eviction
  int64_t corrupt_chunks = 0;  // chunks that failed verification (read, promotion, write-back)
  int64_t expired = 0;         // sessions dropped by TTL
  // Newer unpersisted versions dropped (no host room, failed fill) whose session fell
  // back to its persisted version instead of leaving the store.
  int64_t reverted_to_persisted = 0;
  int64_t persisted_deleted = 0;  // persisted versions deleted (drop, TTL, corruption, SSD room)
  // At the last start: the index was damaged (repaired, replayed past damage or reset),
  // and records dropped because the SSD data file (missing or cut short) cannot back them.
  bool index_damaged = false;
  int64_t unbacked_records = 0;
  // At the last start: acknowledged index writes the index did not give back (a log cut
  // short at its end; SessionIndex::lost_writes).
  int64_t index_lost_writes = 0;
  // At the last start, when the index was rebuilt from the SSD data file's chunk headers
  // (it was damaged, behind, or missing or empty while the file held chunks;
  // index_rebuild.h): the sessions rebuilt, and those found there that were not (no
  // complete, verified version).
  int64_t index_rebuilt_sessions = 0;
  int64_t index_rebuild_skipped_sessions = 0;
  int64_t persisted_saves = 0; // write-backs that committed an index record
  int64_t ssd_write_errors = 0;
  int64_t ssd_bytes_written = 0;
  int64_t ssd_bytes_read = 0;
  int64_t host_capacity_bytes = 0;
  int64_t host_used_bytes = 0;
  int64_t ssd_capacity_bytes = 0;
  int64_t ssd_used_bytes = 0;
  int64_t sessions = 0;
  int64_t host_sessions = 0;
  int64_t ssd_sessions = 0;       // sessions with a persisted SSD copy
  bool ssd_enabled = false;
  bool ssd_degraded = false;
};

// One timed tier operation, for the per-tier I/O latency histograms. Host samples time
// a session's chunk copies in Read()'s visits (read) and Save() (write); SSD samples time one
// block request from submission to completion.
struct TierIoSample {
  Tier tier = Tier::kNone;
  bool write = false;
  int64_t bytes = 0;
  double seconds = 0;
};

class SessionStore;

// One chunk of a lease: its payload (laid out as chunk_format.h says: the row of token
// token_begin + i at RowOffset(l, kv, i)) holding tokens [token_begin, token_begin + count)
// of the session. Rows past `count` may hold later tokens of the session (the lease ends
// mid-chunk) or zeros.
struct LeasedChunk {
  int64_t token_begin = 0;
  int count = 0;
  absl::Span<const std::byte> payload;
};

// A read lease on chunks of a session (SessionStore::Lease). The chunks' host blocks are
// pinned: their payload bytes stay where they are and unchanged until the lease is
// released, whatever happens to the session meanwhile (eviction, demotion, Drop(), a new
// Save(), the TTL sweep: the session may lose the blocks, but they are not freed or
// reused). Pinned blocks count as used host memory. The payload must not be written.
//
// Released by Release() or by the destructor, whichever comes first; move-only. A lease
// object has one owner (it is not safe to use from two threads at once), but it may be
// released on any thread, e.g. a CUDA host-callback thread once the copies that read it
// have completed, provided that thread is not inside a store callback (FillFn,
// PromoteDone). Release takes the store's lock briefly and never waits on the disk. Every
// lease must be released before the store is destroyed: the store's destructor waits for
// them.
class ChunkLease {
 public:
  ChunkLease() = default;  // empty: no chunks, nothing to release
  ChunkLease(ChunkLease&& other) noexcept;
  ChunkLease& operator=(ChunkLease&& other) noexcept;
  ChunkLease(const ChunkLease&) = delete;
  ChunkLease& operator=(const ChunkLease&) = delete;
  ~ChunkLease() { Release(); }

  // The leased chunks, in token order, the first at token 0.
  absl::Span<const LeasedChunk> chunks() const { return chunks_; }
  // Tokens the chunks cover (the sum of their counts).
  int64_t tokens() const { return tokens_; }
  bool empty() const { return chunks_.empty(); }
  // Unpins the blocks; chunks() is empty afterwards. Idempotent.
  void Release();

 private:
  friend class SessionStore;
  ChunkLease(SessionStore* store, std::vector<LeasedChunk> chunks, std::vector<uint32_t> blocks);

  SessionStore* store_ = nullptr;  // null: nothing to release
  std::vector<LeasedChunk> chunks_;
  std::vector<uint32_t> blocks_;   // the pinned host blocks, opaque to the holder
  int64_t tokens_ = 0;
};

class SessionStore {
 public:
  // Fills `fill`'s payload span with the KV of tokens [token_begin, token_begin + count)
  // laid out as chunk_format.h says (row of token_begin + i at RowOffset(l, kv, i)).
  using FillFn = absl::FunctionRef<void(int64_t token_begin, int count, absl::Span<std::byte>)>;
  // Receives a verified chunk's payload holding tokens [token_begin, token_begin + count).
  using VisitFn =
      absl::FunctionRef<void(int64_t token_begin, int count, absl::Span<const std::byte>)>;

  // Returns InvalidArgument when the options do not validate; the SSD tier's and the
  // index's errors when they cannot be opened. With an SSD tier, recovers every
  // persisted session of this model from the index (warm restart).
  static absl::StatusOr<std::unique_ptr<SessionStore>> Create(const SessionStoreOptions& options);
  // Waits for write-backs in flight, then stops.
  virtual ~SessionStore() = default;

  // The longest prefix of `tokens` whose KV is stored for `key`, capped at `max_tokens`,
  // when the session was saved on the same `base` (none when it follows another). Counts
  // as one lookup (a hit when it matched anything) and refreshes the session's last
  // access. The tier is host when a host copy exists, else SSD.
  virtual PrefixMatch Match(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t max_tokens,
                            std::string_view base = {}) = 0;

  // Match for a conversation cut after its first `cut` tokens (one past the model's
  // context window keeps those and drops the oldest tokens after them), whose session may
  // still hold the conversation from before the cut, or from before an earlier one, with
  // the kept tokens further on. Besides the plain prefix, looks for the longest run of
  // `tokens` from `cut` on (up to max_tokens) in the stored tokens after `cut` (the first
  // such run, when the stored tokens [0, cut) are `tokens`' own), and returns whichever
  // covers more: kept = cut and gap = the run's offset there, or the plain prefix. Stored
  // KV is position-free, so the caller may place the run's KV at its new positions. A
  // lookup as Match; the search's work is bounded by a small multiple of the session's
  // tokens.
  virtual PrefixMatch MatchAcrossCut(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t cut,
                                     int64_t max_tokens, std::string_view base = {}) = 0;
  // Refreshes the session's last access (its TTL and its place among the least recently
  // used), as a read would, without a lookup: for a session whose KV is read from memory
  // (a shared system prompt in KV memory). Nothing when it is not held or has expired.
  virtual void Touch(const SessionKey& key) = 0;

  // A turn of `key` reused `tokens` of its session's KV where its lookup matched only
  // `matched` (the caller held the KV outside the store: a copy still being written here,
  // or longer than the stored one): the lookup counts as a hit of `tokens` tokens, so the
  // stats say what turns reused wherever it came from. Nothing when tokens <= matched.
  virtual void CountReuse(const SessionKey& key, int64_t matched, int64_t tokens) = 0;

  // Leases the chunks holding the first `tokens` tokens of the session (all it holds when
  // it holds fewer), promoting the session from SSD first if it has no host copy
  // (blocking this caller only). Each chunk's header is checked (see Verification above);
  // at the first chunk that fails, the session is truncated to the tokens before it (the
  // bad chunk is never served) and the lease ends before it. The caller reads the payloads
  // with no lock held, beside other sessions' store operations, and releases the lease
  // when done (see ChunkLease). Returns NotFound when the session is gone; an empty lease
  // when nothing of it can be served (held only on SSD and the promotion failed, or its
  // first chunk failed its check).
  virtual absl::StatusOr<ChunkLease> Lease(const SessionKey& key, int64_t tokens) = 0;

  // Delivers the KV of the first `tokens` tokens of the session to `visit`, chunk by
  // chunk, in order: Lease(), then `visit` for each leased chunk on this thread with no
  // lock held, then the lease's release. Returns the count delivered (what Lease()
  // covered); NotFound when the session is gone.
  virtual absl::StatusOr<int64_t> Read(const SessionKey& key, int64_t tokens, VisitFn visit) = 0;

  // Brings a session held only on SSD back into host memory, asynchronously: the SSD
  // reads go in flight and `done` runs (on the SSD completion thread, or at once on this
  // thread when there is nothing to do) with OK once the session has a verified host
  // copy. OK at once when it already has one; NotFound when it is not stored (or has no
  // persisted copy); ResourceExhausted when the host tier has no room that eviction can
  // make, or the tenant's own sessions none within its host quota; DataLoss when no chunk
  // survived verification (the session is dropped); Aborted when the session was saved or
  // dropped meanwhile. Concurrent calls for one session share one promotion. `done` must
  // not call back into the store synchronously.
  using PromoteDone = std::function<void(absl::Status)>;
  virtual void Promote(const SessionKey& key, PromoteDone done) = 0;

  // The engine's waiting queue, head first: the look-ahead of scheduler-aware placement.
  // Queued sessions within the eviction window never leave the store; those within the
  // prefetch window that are held only on SSD start coming up to host now.
  virtual void SetLookAhead(const std::vector<SessionKey>& queued) = 0;
  // A gateway hint (CacheService.Prefetch): the session joins the look-ahead after the
  // queue. Returns whether the session is stored.
  virtual bool Hint(const SessionKey& key) = 0;
  // Measured SSD read throughput (bytes/s) of recent promotions; 0 before the first.
  virtual double ssd_read_bytes_per_second() const = 0;

  // Stores the session as `tokens` (all tokens whose KV the caller holds). Chunks that
  // cover only tokens [0, keep_tokens) are kept as they are, as far as the stored version's
  // tokens equal `tokens` (a keep decided against a version since pushed out keeps only
  // what the one stored now shares); every later chunk is written anew through `fill`.
  // `base` names what the tokens follow when their KV was computed after something the
  // session does not store itself (a shared system prompt: its tokens' KV attended to it):
  // opaque to the store, kept and persisted with the session, and Match serves the
  // session only to a caller naming the same base. keep_tokens must be 0 when the base
  // changes (InvalidArgument).
  // Other sessions are demoted or evicted (least recently used first) to make room; with
  // a host quota for the tenant (tenant_quota.h), room within it is made among the
  // tenant's own sessions only. Returns ResourceExhausted, with the session dropped (an
  // older persisted version stays), when it cannot fit even in an empty tier, or when the
  // tenant's own sessions cannot make room for it within its host quota (the message names
  // the quota); InvalidArgument when keep_tokens exceeds what is stored. With an SSD tier
  // the write-back starts in the background.
  virtual absl::Status Save(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t keep_tokens,
                            FillFn fill, std::string_view base = {}) = 0;

  // Save, for a caller whose copies into the payloads complete later (a DMA engine):
  // `fill` only starts them. Until FinishFill(ticket, OK) the new chunks' blocks stay
  // pinned (never reused, even if the session leaves), and the session is neither served
  // (Match and Lease miss) nor written back; FinishFill with an error drops it. Returns the
  // ticket for FinishFill (which must come, also after a failed copy), or Save's errors
  // (then there is nothing to finish).
  virtual absl::StatusOr<uint64_t> SaveAsync(const SessionKey& key, absl::Span<const int32_t> tokens,
                                             int64_t keep_tokens, FillFn fill, std::string_view base = {}) = 0;
  virtual void FinishFill(uint64_t ticket, absl::Status filled) = 0;

  // Blocks until the session as last saved is persisted (OK), or `timeout` passes
  // (DeadlineExceeded). NotFound when there is no such session; FailedPrecondition when
  // there is no SSD tier or it is degraded (nothing can be persisted), or when the last
  // version saved was dropped before it was persisted (it did not fit the host tier, or
  // its copy failed): the session then holds its older persisted version, if any — a
  // persisted version is deleted only by Drop, TTL, corruption or the SSD tier's room.
  // ResourceExhausted when the tenant's own sessions could not make room for it within its
  // SSD quota (it stays host-only, not persisted, until saved again).
  virtual absl::Status Flush(const SessionKey& key, absl::Duration timeout) = 0;
  // Blocks until every write-back queued so far has run (sessions written to SSD, records
  // committed or deletions done), or `timeout` passes (DeadlineExceeded). For a graceful
  // shutdown. OK at once without an SSD tier or when degraded.
  virtual absl::Status AwaitWriteBacks(absl::Duration timeout) = 0;

  // NotFound when the tenant has no such session.
  virtual absl::StatusOr<SessionInfo> Get(const SessionKey& key) const = 0;
  // Drops the session from every tier (its index record is deleted in the background).
  virtual absl::Status Drop(const SessionKey& key) = 0;
  virtual std::vector<SessionInfo> List(const std::string& tenant) const = 0;
  // The held sessions (every tenant's) whose ID starts with `prefix`: how many, how many of
  // them have a host copy and how many are persisted, and their chunks' bytes.
  struct IdPrefixTotals {
    int64_t sessions = 0;
    int64_t on_host = 0;
    int64_t persisted = 0;
    int64_t bytes = 0;
  };
  virtual IdPrefixTotals TotalsOfIdPrefix(std::string_view prefix) const = 0;
  virtual SessionStoreStats Stats() const = 0;
  // The same, seen by one tenant: its own lookups, hits, reused tokens, evictions and quota
  // counters, its quotas, and its own sessions and the bytes they hold in each tier
  // (capacities and the degraded state are the store's).
  virtual SessionStoreStats TenantStats(const std::string& tenant) const = 0;
  // Latency samples since the last call (bounded; the oldest are dropped).
  virtual std::vector<TierIoSample> TakeIoSamples() = 0;

  virtual const ChunkLayout& layout() const = 0;
  // The host tier's arena: every payload that Lease(), Read() and Save() hand out lies in
  // it (for registering it with a DMA engine, e.g. cudaHostRegister). Fixed for the
  // store's life.
  virtual absl::Span<std::byte> host_arena() const = 0;

 protected:
  // For implementations: a lease on `chunks`, held by pins on `blocks` that ReleaseLease
  // gets back. An empty `blocks` gives an empty lease.
  ChunkLease MakeLease(std::vector<LeasedChunk> chunks, std::vector<uint32_t> blocks) {
    if (blocks.empty()) return ChunkLease();
    return ChunkLease(this, std::move(chunks), std::move(blocks));
  }

 private:
  friend class ChunkLease;
  // Unpins the blocks of a lease; runs once per non-empty lease, on the releasing thread.
  virtual void ReleaseLease(std::vector<uint32_t> blocks) = 0;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_STORE_H_
