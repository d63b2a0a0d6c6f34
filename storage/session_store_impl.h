// SessionStoreImpl: the machinery behind the SessionStore contract (session_store.h),
// for storage/ only. One mutex guards the in-memory state; copies through Save()'s fill
// run under it, reads of leased chunks (Lease(), Read()'s visit) outside it, and so does
// every pass over a payload (sealing and checks in the write-back, checks of promoted
// chunks). The work is spread over five files:
//   session_store.cc        match, lease and read, save, info and stats
//   session_recovery.cc     recovery at start, from the index or rebuilt from the data file
//   session_persistence.cc  write-back to SSD, retiring freed blocks, flush, TTL, degraded mode
//   session_prefetch.cc     promotion from SSD, the look-ahead and prefetch, hints
//   session_room.cc         room in the host tier, and within tenants' quotas (their own sessions)
#ifndef STRATA_STORAGE_SESSION_STORE_IMPL_H_
#define STRATA_STORAGE_SESSION_STORE_IMPL_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "storage/host_tier.h"
#include "storage/placement.h"
#include "storage/pending_drops.h"
#include "storage/session_index.h"
#include "storage/session_store.h"
#include "storage/ssd_tier.h"
#include "storage/write_journal.h"

namespace strata::storage {

class SessionStoreImpl final : public SessionStore {
 public:
  // Create() validates the options and opens the tiers; this takes them over.
  SessionStoreImpl(const SessionStoreOptions& options, std::unique_ptr<HostTier> host,
                   std::unique_ptr<SsdTier> ssd, std::unique_ptr<SessionIndex> index,
                   std::unique_ptr<WriteJournal> journal = nullptr);
  ~SessionStoreImpl() override;

  // With an SSD tier: recovers the persisted sessions, then starts the write-back thread.
  absl::Status Start();

  // SessionStore:
  void Touch(const SessionKey& key) override;
  IdPrefixTotals TotalsOfIdPrefix(std::string_view prefix) const override;
  PrefixMatch Match(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t max_tokens,
                    std::string_view base) override;
  PrefixMatch MatchAcrossCut(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t cut,
                             int64_t max_tokens, std::string_view base) override;
  void CountReuse(const SessionKey& key, int64_t matched, int64_t tokens) override;
  absl::StatusOr<ChunkLease> Lease(const SessionKey& key, int64_t tokens) override;
  absl::StatusOr<int64_t> Read(const SessionKey& key, int64_t tokens, VisitFn visit) override;
  void Promote(const SessionKey& key, PromoteDone done) override;
  void SetLookAhead(const std::vector<SessionKey>& queued) override;
  bool Hint(const SessionKey& key) override;
  double ssd_read_bytes_per_second() const override;
  absl::Status Save(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t keep_tokens,
                    FillFn fill, std::string_view base) override;
  absl::StatusOr<uint64_t> SaveAsync(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t keep_tokens,
                                     FillFn fill, std::string_view base) override;
  void FinishFill(uint64_t ticket, absl::Status filled) override;
  absl::Status Flush(const SessionKey& key, absl::Duration timeout) override;
  absl::Status AwaitWriteBacks(absl::Duration timeout) override;
  absl::StatusOr<SessionInfo> Get(const SessionKey& key) const override;
  absl::Status Drop(const SessionKey& key) override;
  std::vector<SessionInfo> List(const std::string& tenant) const override;
  SessionStoreStats Stats() const override;
  SessionStoreStats TenantStats(const std::string& tenant) const override;
  std::vector<TierIoSample> TakeIoSamples() override;
  const ChunkLayout& layout() const override { return options_.layout; }
  absl::Span<std::byte> host_arena() const override;

 private:
  struct Promotion {
    uint64_t version = 0;              // the session's version when it started
    bool prefetch = false;             // started from the look-ahead, not by a turn
    bool late = false;                 // a turn came for it before it completed
    absl::Time start;
    std::vector<uint32_t> blocks;      // host blocks being read into, one per chunk
    std::vector<std::byte*> targets;   // their bytes (for checks outside the lock)
    std::vector<std::optional<uint64_t>> checksums;  // the record's, for these blocks
    std::vector<PromoteDone> waiters;
    // SSD blocks of a record replaced while this promotion reads them: freed when it ends.
    std::vector<SsdLocation> free_after;
  };
  struct Session {
    std::string tenant;
    std::string session_id;
    std::vector<int32_t> tokens;       // tokens whose KV the chunks hold
    std::string base;                  // what those tokens follow (Save's base)
    std::vector<uint32_t> host;        // host block of each chunk; empty: no host copy
    std::vector<SsdLocation> ssd;      // SSD copy named by the committed index record
    // What that committed record holds (empty when there is none): the version the
    // session falls back to when a newer, unpersisted one cannot be kept.
    std::vector<int32_t> committed_tokens;
    std::string committed_base;
    std::vector<uint64_t> committed_checksums;
    // Set when the last version saved was dropped before it was persisted (why), so that
    // Flush does not report it persisted; cleared by the next save.
    const char* dropped_newer = nullptr;
    // Set when the write-back of the last version saved was refused for the tenant's SSD
    // quota (it stays host-only), so that Flush says so; cleared by the next save.
    bool over_ssd_quota = false;
    // Payload checksum of each chunk: set when the write-back sealed it or the index
    // record named it, nullopt while unsealed. Binds the record to the bytes: every chunk
    // of a persisted session has one, and it is the one its record and header hold.
    std::vector<std::optional<uint64_t>> checksums;
    bool persisted = false;            // `ssd` holds exactly `tokens`, record committed
    // Set from the store-wide versions_ by every Save (and cut or fallback), so a version
    // number never repeats, not even for a session dropped and saved again while a
    // write-back of its old self is in flight.
    uint64_t version = 0;
    uint64_t born = 0;                 // unique per Session object (from versions_)
    uint64_t last_use = 0;             // logical clock of the last access (LRU)
    uint64_t inserted = 0;             // logical clock of the first save (FIFO)
    bool prefetched = false;           // on host thanks to a prefetch, not yet used
    int64_t last_access_unix_ms = 0;
    int readers = 0;                   // promotions in flight for this session (0 or 1)
    uint64_t filling = 0;              // SaveAsync's ticket while its payloads are being filled
    std::shared_ptr<Promotion> promotion;  // set while SSD reads are in flight
  };
  // A SaveAsync whose payloads are still being filled: its new blocks stay pinned.
  struct Fill {
    std::string map_key;
    uint64_t version = 0;
    std::vector<uint32_t> blocks;
  };
  // Save and SaveAsync; with `fill_ticket` the new blocks are pinned for FinishFill and
  // the write-back waits for it.
  absl::Status SaveLocked(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t keep_tokens,
                          FillFn fill, std::string_view base, uint64_t* fill_ticket)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct PersistJob {
    std::string map_key;
    uint64_t version = 0;
    bool drop = false;    // delete the record, then retire `free_after`
    bool retire = false;  // retire `free_after` (no record to delete)
    bool sync = false;    // retire: sync the erasures before the blocks come free
    std::string tenant, session_id;
    std::vector<SsdLocation> free_after;
  };

  SessionInfo InfoLocked(const Session& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ExpiredLocked(const Session& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropHostLocked(Session& s, size_t keep_chunks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A chunk failed verification: counts and logs it, truncates the session to the tokens
  // before `chunk` and replaces its record (removing the session when nothing is left;
  // `s` is then gone).
  void CutCorruptLocked(const std::string& map_key, Session& s, size_t chunk, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a lease pins any of the session's host blocks.
  bool LeasedLocked(const Session& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLease(std::vector<uint32_t> blocks) override;
  // Removes the session from every tier; the SSD blocks are freed after its record is
  // deleted (in the background). `why` names the cause in the one log line and the count
  // of deleted persisted versions (DropSession, TTL, corruption), when it had one.
  void RemoveLocked(const std::string& map_key, const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The session's newer, unpersisted version cannot be kept (no host room, a failed
  // fill): it goes, and the session falls back to its committed record (SSD only,
  // persisted), or leaves the store when it has none. An acknowledged version is never
  // lost this way.
  void DropNewerVersionLocked(const std::string& map_key, const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the session hold what its committed record holds (tokens and checksums; its
  // host copy, if any, must already be gone): persisted, and a new version, so that a
  // fill, write-back or promotion of what it held before is not applied.
  void UseCommittedLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room for `blocks` more host blocks of `keep`: first within its tenant's host
  // quota, among the tenant's own sessions (MakeHostQuotaRoomLocked; `over_quota`, when
  // given, says whether that failed), then in the tier: demotes or evicts sessions other
  // than `keep` (only the tenant's own when it was at its quota), in the placement
  // policy's order, until `blocks` host blocks are free. A prefetch moves nothing unless
  // all of the room can be made.
  bool MakeHostRoomLocked(int64_t blocks, const Session* keep, RoomFor purpose = RoomFor::kHost,
                          bool* over_quota = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sessions whose host copies may go for `purpose` (of `tenant` only, when not null),
  // first to go first.
  std::vector<std::string> HostVictimsLocked(const Session* keep, RoomFor purpose, const std::string* tenant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the host copy of the session: demoted when persisted, else its version evicted
  // when it may leave the store (counted under the host tier's or, with `quota`, the host
  // quota's reason). False when it had to stay (queued within the eviction window). The
  // session may be gone afterwards.
  bool TakeHostCopyLocked(const std::string& key, bool quota) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Tenant quotas (session_room.cc).
  struct TenantBlocks {
    int64_t host = 0;  // host copies, and promotions in flight to host
    int64_t ssd = 0;   // SSD copies named by committed records
  };
  TenantBlocks TenantBlocksLocked(const std::string& tenant) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A quota in bytes as whole blocks; 0: none.
  int64_t QuotaBlocks(int64_t bytes) const;
  // Makes room for `blocks` more host blocks of `keep` within its tenant's host quota, among
  // the tenant's own sessions (never another's), in the placement policy's order; nothing
  // moves unless all of it can be made. False (counted and logged, but for a prefetch) when
  // it cannot. `own_only` says whether the blocks would have put the tenant over its quota
  // (then the tier's room, too, may only come from its own sessions).
  bool MakeHostQuotaRoomLocked(int64_t blocks, const Session& keep, RoomFor purpose, bool* own_only)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // In the write-back of `s` (`blocks` chunks): room within its tenant's SSD quota, from the
  // tenant's own sessions held only on SSD. They leave the store (their persisted copies
  // deleted: counted and logged) and join `evicted`, whose blocks the caller frees once
  // their records are deleted; `freeing` grows by those blocks. Nothing moves unless all
  // of the room can be made; false (counted, logged, `s.over_ssd_quota` set) when it cannot.
  bool MakeSsdQuotaRoomLocked(Session& s, int64_t blocks,
                              std::vector<std::pair<SessionKey, std::vector<SsdLocation>>>* evicted, int64_t* freeing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts (or joins) the promotion of a session held only on SSD; see Promote().
  void PromoteFor(const SessionKey& key, PromoteDone done, bool prefetch);
  // Refreshes the placement's windows and returns the sessions to prefetch now.
  std::vector<SessionKey> PrefetchCandidatesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPrefetches(const std::vector<SessionKey>& keys);
  // Runs when a promotion's SSD reads have all completed: verifies the chunks and gives
  // the session its host copy, then tells the waiters.
  void FinishPromotion(const std::string& map_key, const std::shared_ptr<Promotion>& promotion, absl::Status io);

  // Recovery (session_recovery.cc): the persisted sessions from the index, which is first
  // rebuilt from the SSD data file when it was lost (RebuildIndexIfLost).
  absl::Status Recover();
  // When the index was found damaged, behind its record of acknowledged writes, or missing
  // or empty while the data file holds chunks: rebuilds it from the data file's chunk
  // headers (index_rebuild.h), erases the headers it does not use, and logs one line.
  // Returns whether it logged (the damage and loss notes then need no line of their own).
  bool RebuildIndexIfLost();

  // Persistence (session_persistence.cc): write-back, TTL, degraded mode.
  void PersistLoop();
  void RunPersistJob(PersistJob job);
  void WriteBack(const std::string& map_key, uint64_t version);
  void EnterDegradedLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SSD blocks that may hold a chunk go back to the free list only retired: their chunk
  // headers erased first, so that no index rebuild takes up what they held (synced first
  // with `sync`, for a session that left the store). RetireLocked queues that at the front
  // of the persist queue; RetireSsdBlocks does it (persist thread, unlocked, blocking).
  void RetireLocked(std::vector<SsdLocation> blocks, bool sync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetireSsdBlocks(const std::vector<SsdLocation>& blocks, bool sync);
  // The generation of the next write-back: above every one before it, in this process or
  // (through the index records and the data file) an earlier one.
  uint64_t NextGenerationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // While degraded, at most every sweep interval: when the SSD and index file systems
  // have room again, reopens the index for writing and resumes persisting (the sessions
  // waiting for it and the deferred drops). Called by the persist thread, unlocked.
  void TryLeaveDegraded();
  // Where a pending rebuild is marked (beside the index's directory, which a rebuild
  // replaces); MarkRebuildPending writes it, synced; false when it could not.
  std::string RebuildPendingPath() const;
  bool MarkRebuildPending();
  void SweepExpiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the write-back of the session's current version (no-op without an SSD tier).
  void EnqueueWriteBackLocked(const std::string& map_key, const Session& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddHostSampleLocked(bool write, int64_t bytes, absl::Duration d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionStoreOptions options_;
  mutable Mutex mu_;
  std::unique_ptr<HostTier> host_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WriteJournal> journal_;   // crash tests only; outlives the tier and index
  std::unique_ptr<SsdTier> ssd_;            // thread-safe itself; null: no SSD tier
  std::unique_ptr<SessionIndex> index_;     // thread-safe itself; null: no SSD tier
  // Drops the index could not record yet (pending_drops.h), beside it; the persist thread
  // adds, recovery reads and clears.
  PendingDrops pending_drops_{options_.index_dir + ".pending-drops"};
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t versions_ ABSL_GUARDED_BY(mu_) = 0;  // the last session version handed out
  uint64_t last_generation_ ABSL_GUARDED_BY(mu_) = 0;    // the last write-back generation handed out
  int64_t undescribed_writes_ ABSL_GUARDED_BY(mu_) = 0;  // versions persisted without chunk descriptors
  int64_t retire_failures_ ABSL_GUARDED_BY(mu_) = 0;     // erasures of freed blocks that failed
  SessionStoreStats stats_ ABSL_GUARDED_BY(mu_);
  // What each tenant's own Stats report of the traffic (TenantStats counts the rest).
  struct TenantCounters {
    int64_t lookups = 0, hits = 0, hit_tokens = 0, evictions = 0;
    int64_t quota_evictions_host = 0, quota_evictions_ssd = 0, quota_refused_host = 0, quota_refused_ssd = 0;
  };
  absl::flat_hash_map<std::string, TenantCounters> tenant_stats_ ABSL_GUARDED_BY(mu_);
  bool degraded_ ABSL_GUARDED_BY(mu_) = false;
  // The index was lost when it could not be written: its rebuild waits for a start with
  // room. Leaving degraded in this run first marks it pending (MarkRebuildPending), so that
  // the next start rebuilds it though this run wrote records to it since.
  bool rebuild_pending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_recovery_try_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Record deletions the index refused while read-only: retried when it is writable.
  std::deque<PersistJob> deferred_drops_ ABSL_GUARDED_BY(mu_);
  // Sessions whose write-back found no SSD room: queued again when blocks come free.
  absl::btree_set<std::string> waiting_for_room_ ABSL_GUARDED_BY(mu_);
  std::deque<PersistJob> persist_queue_ ABSL_GUARDED_BY(mu_);
  std::deque<TierIoSample> host_samples_ ABSL_GUARDED_BY(mu_);
  int persist_busy_ ABSL_GUARDED_BY(mu_) = 0;
  int promotions_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint16_t> lease_pins_ ABSL_GUARDED_BY(mu_);  // leases pinning each host block
  int64_t leases_out_ ABSL_GUARDED_BY(mu_) = 0;             // leases (and fills) not yet released
  absl::flat_hash_map<uint64_t, Fill> fills_ ABSL_GUARDED_BY(mu_);  // by ticket
  uint64_t next_fill_ ABSL_GUARDED_BY(mu_) = 1;
  Placement placement_ ABSL_GUARDED_BY(mu_);
  double ssd_read_bytes_per_second_ ABSL_GUARDED_BY(mu_) = 0;  // EWMA over promotions
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread persist_thread_;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_STORE_IMPL_H_
