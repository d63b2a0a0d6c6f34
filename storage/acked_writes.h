// AckedWrites: the session index's own record of its last acknowledged writes, kept beside
// the RocksDB database in the index directory (file `STRATA-ACKED`).
//
// RocksDB replays a log cut short at its end as if it were a crash's torn tail: the
// acknowledged writes in the cut part vanish without a word. So after each index write
// is synced (and only then), SessionIndex records here RocksDB's sequence number after it
// and the write's key, with one pwrite and one fdatasync. At the next open, a database
// whose recovered sequence number is below the recorded one has lost acknowledged writes:
// how many is the difference (strata writes one key per RocksDB write), and the recent
// ones are named. Since a write is recorded only once it is durable in the index, the
// record never runs ahead of the index: a clean shutdown, a kill or a power cut that
// takes the record's own last write back leave it at or behind the index.
//
// Format (little-endian): two slots of kSlotBytes at offsets 0 and kSlotBytes, written in
// turn (generation % 2), so a write torn by a power cut leaves the other slot whole. A
// slot: magic u32, version u32, used u32 (bytes up to the checksum), u32 0, generation
// u64, sequence u64, n u32, then n entries (sequence u64, op u8 [1 put, 2 delete],
// key u32 length + bytes), newest last, then XXH3-64 of the bytes before it. The slot
// with a valid checksum and the higher generation is the record.
//
// Thread-compatible: SessionIndex serializes its calls.
#ifndef STRATA_STORAGE_ACKED_WRITES_H_
#define STRATA_STORAGE_ACKED_WRITES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::storage {

class AckedWrites {
 public:
  static constexpr const char* kFileName = "STRATA-ACKED";
  static constexpr uint32_t kMagic = 0x4b415353;  // "SSAK"
  static constexpr uint32_t kVersion = 1;
  static constexpr int64_t kSlotBytes = 4096;
  // Keys of the most recent writes kept (fewer when long keys fill the slot).
  static constexpr int kRecentKeys = 16;

  struct Write {
    uint64_t sequence = 0;
    bool deleted = false;  // a Delete (the session may come back if it is lost), else a Put
    std::string key;       // SessionIndex::Key
    bool operator==(const Write&) const = default;
  };
  struct State {
    uint64_t generation = 0;
    uint64_t sequence = 0;     // RocksDB's sequence number after the last acknowledged write
    std::vector<Write> recent;  // oldest first
  };

  // Reads the record in `dir` (nothing is written until Record or Reset). No file, or no
  // whole slot: a state of sequence 0, which checks nothing. Returns non-OK only when an
  // existing file cannot be read.
  static absl::StatusOr<std::unique_ptr<AckedWrites>> Open(const std::string& dir);
  ~AckedWrites();
  AckedWrites(const AckedWrites&) = delete;
  AckedWrites& operator=(const AckedWrites&) = delete;

  // What the file held at Open.
  const State& found() const { return found_; }

  // The writes the record names after `recovered` (RocksDB's sequence number at open):
  // `lost` is how many acknowledged writes are missing (0 when none), `named` those of
  // them whose keys are kept, oldest first.
  void Lost(uint64_t recovered, int64_t* lost, std::vector<Write>* named) const;

  // After a synced index write that left RocksDB at `sequence`: records it durably.
  // Sequences must not go down between Resets.
  absl::Status Record(uint64_t sequence, bool deleted, std::string_view key);
  // Starts the record over at `sequence` with no keys (after open, once any loss has been
  // reported): writes both slots.
  absl::Status Reset(uint64_t sequence);

  // Slot encoding, exposed for tests. Decode returns DataLoss for anything that is not a
  // whole slot of this version.
  static std::string EncodeSlot(const State& state);
  static absl::StatusOr<State> DecodeSlot(std::string_view bytes);

 private:
  explicit AckedWrites(std::string path) : path_(std::move(path)) {}
  absl::Status WriteSlot();  // state_ at slot state_.generation % 2, synced
  const std::string path_;
  int fd_ = -1;  // opened at the first write
  State found_;
  State state_;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_ACKED_WRITES_H_
