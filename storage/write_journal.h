// WriteJournal: what a power cut would take back, for crash tests. SIGKILL keeps the page
// cache, so it never tests the order of writes and syncs; with a journal, the store (its
// SSD data files and the RocksDB index) records every write's durability as it goes —
// the bytes an SSD block held before a write that no completed fdatasync covers yet, and
// how much of each index file a completed sync made durable — and ApplyPowerCut() then
// puts the files back to what a machine that lost power at that moment would hold:
// unsynced SSD block writes lost, index files cut to their last synced length, files never
// synced gone. (RocksDB's FaultInjectionTestFS is the model.)
//
// Off in production (SessionStoreOptions::power_cut_journal_dir empty). Thread-safe; each
// line is appended with one write(2), so a process killed at any point leaves a journal
// of whole lines (a cut last line is ignored).
#ifndef STRATA_STORAGE_WRITE_JOURNAL_H_
#define STRATA_STORAGE_WRITE_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rocksdb {
class FileSystem;
}

namespace strata::storage {

class WriteJournal {
 public:
  static absl::StatusOr<std::unique_ptr<WriteJournal>> Open(const std::string& dir);
  ~WriteJournal();

  // SSD data files. Before a block write: saves the block's current bytes, unless a
  // pre-image of it is already pending since the file's last sync.
  void BeforeBlockWrite(const std::string& file, uint64_t offset, int64_t bytes);
  // A position in the journal, taken before an fdatasync starts; SyncedData(file, mark)
  // after it succeeded: the writes journaled before the mark are durable.
  uint64_t Mark();
  void SyncedData(const std::string& file, uint64_t mark);

  // Index files (through IndexFileSystem).
  void Created(const std::string& path, uint64_t size);  // opened for writing at `size`
  void Synced(const std::string& path, uint64_t size);
  void Renamed(const std::string& from, const std::string& to);
  void Deleted(const std::string& path);

  // The RocksDB file system that journals the index's files into this journal.
  std::shared_ptr<rocksdb::FileSystem> IndexFileSystem();
  // From now on every sync of an index file fails (an I/O error, as a dying disk gives).
  void FailIndexSyncs(bool fail) { index_syncs_fail_ = fail; }
  bool index_syncs_fail() const { return index_syncs_fail_; }

 private:
  explicit WriteJournal(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  void Append(const std::string& line);
  const std::string dir_;
  const int fd_;
  std::mutex mu_;
  uint64_t next_ = 0;                                   // lines written
  std::set<std::pair<std::string, uint64_t>> pending_;  // blocks with a pre-image since their file's sync
  std::atomic<bool> index_syncs_fail_{false};
};

// Puts the files the journal in `dir` names back to their state at a power cut (see
// above). Run after the process that wrote them has died, before anything reopens them.
absl::Status ApplyPowerCut(const std::string& dir);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_WRITE_JOURNAL_H_
