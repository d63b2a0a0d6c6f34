// SessionIndex: the durable index of persisted sessions, in RocksDB.
//
// One record per session, keyed by (tenant, session_id): the token IDs its KV covers, the
// SSD location and payload checksum of each chunk, the model fingerprint, last access
// and expiry. A record is the commit point of a persisted session: SessionStore writes a
// session's chunks, syncs the SSD files, and only then Put()s the record (a synced
// RocksDB write). Records are encoded with a magic, a version and an XXH3 checksum, so a
// damaged record is detected and dropped, never trusted.
//
// Thread-safe.
#ifndef STRATA_STORAGE_SESSION_INDEX_H_
#define STRATA_STORAGE_SESSION_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rocksdb {
class DB;
}

namespace strata::storage {

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
  std::vector<IndexedChunk> chunks;
  int64_t last_access_unix_ms = 0;
  int64_t expires_unix_ms = 0;
  bool operator==(const SessionRecord&) const = default;
};

// Record encoding, exposed for tests. Decode returns DataLoss for anything that is not a
// whole, undamaged record of a known version.
std::string EncodeSessionRecord(const SessionRecord& record);
absl::StatusOr<SessionRecord> DecodeSessionRecord(std::string_view bytes);

class SessionIndex {
 public:
  // Opens (creating if needed) the RocksDB database in `dir`.
  static absl::StatusOr<std::unique_ptr<SessionIndex>> Open(const std::string& dir);
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

 private:
  explicit SessionIndex(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_INDEX_H_
