// PendingDrops: sessions dropped while the session index could not be written (a full or
// read-only file system), recorded in a small file beside it, so that a restart before the
// index takes writes again does not bring them back (the index still holds their records;
// the store deletes them at the first start that can). One line a drop, appended and
// synced: the drop's time (unix µs: records written after it carry higher generations,
// NextGenerationLocked), then the tenant's and the session id's lengths, then both.
// Not thread-safe: the store's persist thread and its recovery are the callers.
#ifndef STRATA_STORAGE_PENDING_DROPS_H_
#define STRATA_STORAGE_PENDING_DROPS_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "storage/session_key.h"

namespace strata::storage {

class PendingDrops {
 public:
  explicit PendingDrops(std::string path) : path_(std::move(path)) {}

  // Records that `key` was dropped at `when_us`, synced. An error when it could not be
  // (then a restart before the index is writable may bring the session back).
  absl::Status Add(const SessionKey& key, uint64_t when_us);
  // Every drop recorded: SessionMapKey -> the latest drop's time. Lines cut short (a crash
  // in an append) are skipped; a missing file is none.
  absl::flat_hash_map<std::string, uint64_t> Load() const;
  // Forgets them all (the index holds none of their records any more).
  void Clear();

 private:
  std::string path_;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_PENDING_DROPS_H_
