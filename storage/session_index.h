// SessionIndex: the durable index of persisted sessions, in RocksDB.
//
// One record per session, keyed by (tenant, session_id): the token IDs its KV covers, the
// SSD location and payload checksum of each chunk, the model fingerprint, last access
// and expiry. A record is the commit point of a persisted session: SessionStore writes a
// session's chunks, syncs the SSD files, and only then Put()s the record (a synced
// RocksDB write). Records are encoded with a magic, a version and an XXH3 checksum, so a
// damaged record is detected and dropped, never trusted. Each acknowledged write is also
// recorded beside the database (AckedWrites, acked_writes.h), so that acknowledged writes
// missing at the next open (a log cut short at its end) are reported, not silent.
//
// Thread-safe. Writes (Put, Delete, DeleteKey) are serialized.
#ifndef STRATA_STORAGE_SESSION_INDEX_H_
#define STRATA_STORAGE_SESSION_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"

namespace rocksdb {
class DB;
class Env;
}

namespace strata::storage {

class AckedWrites;

struct IndexedChunk {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint32_t tokens = 0;    // tokens the chunk holds
  uint64_t checksum = 0;  // XXH3-64 of the chunk's payload
  bool operator==(const IndexedChunk&) const = default;
};

struct SessionRecord {
  std::string tenant;
  std::string session_id;
  uint64_t model_fingerprint = 0;
  std::vector<int32_t> tokens;
  std::string base;  // what the tokens follow (SessionStore::Save's base), "" for none
  std::vector<IndexedChunk> chunks;
  int64_t last_access_unix_ms = 0;
  int64_t expires_unix_ms = 0;
  // The write-back that wrote these chunks (their descriptors carry it too, chunk_format.h):
  // grows across restarts, so the newest version of a session on disk is the one with the
  // highest. 0 in records written before it was kept.
  uint64_t generation = 0;
  bool operator==(const SessionRecord&) const = default;
};

// Record encoding, exposed for tests. Decode returns DataLoss for anything that is not a
// whole, undamaged record of a known version.
std::string EncodeSessionRecord(const SessionRecord& record);
absl::StatusOr<SessionRecord> DecodeSessionRecord(std::string_view bytes);

// An acknowledged index write that the database did not give back when it was opened.
struct LostWrite {
  std::string tenant;
  std::string session_id;
  bool deleted = false;  // the lost write deleted the record (a dropped session may be back)
  bool operator==(const LostWrite&) const = default;
};

class SessionIndex {
 public:
  // Free bytes the index's file system must have for the index to be opened for writing
  // (RocksDB writes a new MANIFEST and WAL when it opens; on a full disk Debian's build
  // aborts there instead of failing).
  static constexpr int64_t kMinFreeBytes = int64_t{16} << 20;

  // Opens (creating if needed) the RocksDB database in `dir` for writing. On a full or
  // read-only file system it opens it read-only instead (an empty index when there is
  // none yet): read_only() says so, and writes are FailedPrecondition until
  // ReopenWritable() succeeds.
  // `journal` (crash tests; not owned, outlives the index) records its files' syncs.
  static absl::StatusOr<std::unique_ptr<SessionIndex>> Open(const std::string& dir,
                                                           class WriteJournal* journal = nullptr);
  ~SessionIndex();
  SessionIndex(const SessionIndex&) = delete;
  SessionIndex& operator=(const SessionIndex&) = delete;

  // Durable when it returns OK (synced write).
  absl::Status Put(const SessionRecord& record);
  // NotFound when there is no record. Durable when it returns OK.
  absl::Status Delete(const std::string& tenant, const std::string& session_id);
  // Deletes by raw key (for records too damaged to decode).
  absl::Status DeleteKey(std::string_view key);
  absl::StatusOr<SessionRecord> Get(const std::string& tenant, const std::string& session_id) const;
  // Calls `visit` for every decodable record and `bad` for every record that is not.
  absl::Status ForEach(const std::function<void(const SessionRecord&)>& visit,
                       const std::function<void(std::string_view key, const absl::Status&)>& bad) const;

  static std::string Key(const std::string& tenant, const std::string& session_id);

  // What was wrong with the database when it was opened, "" when nothing: a damaged
  // index is never fatal. A log damaged in its middle is replayed skipping the damaged
  // records; a damaged MANIFEST or CURRENT is repaired (RocksDB's RepairDB); what cannot
  // be repaired starts empty. The damaged database is first copied aside (the note names
  // the copy) for inspection.
  const std::string& damage_note() const { return damage_note_; }

  // Acknowledged writes the database did not give back when it was opened, as counted
  // against the record kept beside it (acked_writes.h): 0 when none. RocksDB replays a
  // log cut short at its end (half the file gone) as a crash's torn tail, so only this
  // record tells the two apart. Also counts writes lost with damage (damage_note()).
  int64_t lost_writes() const { return lost_writes_; }
  // The most recent of those writes (AckedWrites::kRecentKeys at most), oldest first;
  // fewer than lost_writes() when older ones were lost too.
  const std::vector<LostWrite>& lost_named() const { return lost_named_; }
  // One line saying what was lost and what to do, "" when nothing (or why the check could
  // not be made).
  const std::string& lost_note() const { return lost_note_; }
  // Whether there was no database in the directory when it was opened (a first start, or
  // the directory was deleted): a new, empty one was created.
  bool created_at_open() const { return created_at_open_; }
  // Whether the index holds no record at all (decodable or not).
  bool Empty() const;

  // Replaces everything the index holds with `records` (an index rebuilt from the SSD data
  // file, index_rebuild.h): the database is removed — copied aside first when `set_aside`,
  // as a damaged one is at open, the copy's path then in `*aside` — and a new one is
  // created holding the records, written in one synced batch; the record of acknowledged
  // writes starts over at its sequence number. Returns FailedPrecondition when the index
  // is read-only; RocksDB's error otherwise, after which the index is read-only (writes
  // refused until ReopenWritable succeeds). Not concurrent with other calls (the store
  // calls it once, at recovery, before anything else uses the index).
  absl::Status StartOver(const std::vector<SessionRecord>& records, bool set_aside, std::string* aside);

  // Whether writes are refused: opened read-only (no room, read-only file system), or a
  // write failed (RocksDB must not be written again through that handle).
  bool read_only() const;
  // Why it is read-only ("" when it is not).
  std::string read_only_reason() const;
  // When read-only: reopens the database for writing if its file system has room now.
  // OK when writable afterwards; FailedPrecondition (why) otherwise. Not concurrent with
  // other calls (the store's persist thread is the only caller after recovery).
  absl::Status ReopenWritable();

  // Free bytes of the file system holding `dir` (or its nearest existing parent); -1
  // when unknown.
  static int64_t FreeBytes(const std::string& dir);

 private:
  SessionIndex(std::string dir, std::unique_ptr<rocksdb::DB> db, std::string read_only_reason);
  absl::Status Refuse() const;
  absl::Status Written(absl::Status s);  // a failed write makes the index read-only
  // Compares the database as opened with `acked_` and says what is missing.
  void CheckAcknowledged();
  // Starts acked_ over at the database's sequence number when it is ahead of it (after a
  // loss is reported, once the index is writable), so the loss is reported once.
  void ResetAcknowledged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // After a write that left the database durable: records it in acked_.
  void Acknowledge(bool deleted, std::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  const std::string dir_;
  bool created_at_open_ = false;
  std::string damage_note_;
  int64_t lost_writes_ = 0;
  std::vector<LostWrite> lost_named_;
  std::string lost_note_;
  Mutex write_mu_;  // serializes writes, so each one's sequence number is its own
  std::unique_ptr<AckedWrites> acked_ ABSL_GUARDED_BY(write_mu_);  // null: could not be read
  int64_t acked_failures_ ABSL_GUARDED_BY(write_mu_) = 0;
  std::unique_ptr<rocksdb::Env> env_;  // the journal's, when there is one (outlives db_)
  std::unique_ptr<rocksdb::DB> db_;  // null: read-only and no database yet
  mutable std::mutex mu_;            // guards read_only_reason_
  std::string read_only_reason_;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_INDEX_H_
