// SsdTier: the SSD tier. Fixed-size chunk blocks in one preallocated file per directory,
// read and written with io_uring and O_DIRECT.
//
// Each directory holds one file, `strata-ssd.data`, of capacity_bytes_per_dir rounded down
// to whole blocks, preallocated with fallocate (where the file system cannot preallocate
// it all, the file is sparse and a later write may fail with ENOSPC: the caller degrades).
// Blocks are placed by a per-file allocator that hands out the lowest free block, so a
// session's chunks saved together lie in one extent where the file has one; files are
// used in turn, so a session's I/O spreads over every device.
//
// I/O is asynchronous: Write() and Read() queue a request and return at once; a completion
// thread per tier reaps the ring, starts waiting requests in the freed slots (one submit per
// batch of completions) and runs the callbacks. Up to queue_depth requests are in flight;
// the rest wait in arrival order. No caller ever waits, for the disk or for a slot. Buffers must be aligned to
// 4096 bytes; those inside the range given to RegisterBuffers() (the host arena) go
// through io_uring's fixed-buffer path, with no per-I/O page pinning.
//
// Thread-safe.
#ifndef STRATA_STORAGE_SSD_TIER_H_
#define STRATA_STORAGE_SSD_TIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::storage {

struct SsdTierOptions {
  std::vector<std::string> dirs;
  int64_t capacity_bytes_per_dir = 0;
  int64_t block_bytes = 0;  // a multiple of 4096
  int queue_depth = 64;
  // Crash tests: every block write and completed sync is journaled (write_journal.h);
  // null in production. Not owned.
  class WriteJournal* journal = nullptr;
  // Tests: this many io_uring_submit calls fail (EBUSY) before the ring is submitted to.
  int failed_submits_for_testing = 0;
};

struct SsdLocation {
  uint32_t file = 0;    // index into SsdTierOptions::dirs
  uint64_t offset = 0;  // byte offset of the block in the file
  bool operator==(const SsdLocation&) const = default;
};

// Latency of completed requests, for the tier's I/O histograms.
struct SsdIoSample {
  bool write = false;
  int64_t bytes = 0;
  double seconds = 0;
};

class SsdTier {
 public:
  using Callback = std::function<void(absl::Status)>;

  // InvalidArgument for bad options; the OS error when a directory or file cannot be made,
  // opened with O_DIRECT or sized; Unavailable when io_uring cannot be set up.
  static absl::StatusOr<std::unique_ptr<SsdTier>> Open(const SsdTierOptions& options);
  // Waits for every request in flight, then closes the files.
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // Registers [base, base + bytes) with the ring for fixed-buffer I/O. Call once, before
  // any I/O; the range must stay mapped for the life of the tier.
  absl::Status RegisterBuffers(std::byte* base, int64_t bytes);

  // A free block, or nullopt when every block of every file is in use.
  std::optional<SsdLocation> Allocate();
  void Free(const SsdLocation& loc);
  // Marks a block named by a recovered index record as in use. Returns false when it is
  // not a valid location or already in use.
  bool MarkAllocated(const SsdLocation& loc);
  bool IsValidLocation(const SsdLocation& loc) const;
  // Whether the block lay within its file as the file was found at open: a block of a
  // file created at open (the old one deleted) or cut short since cannot hold what an
  // index record says it holds.
  bool FoundAtOpen(const SsdLocation& loc) const;
  // Every block for which FoundAtOpen() holds, file by file, in offset order (what a
  // rebuild of the index scans).
  std::vector<SsdLocation> LocationsFoundAtOpen() const;

  // Queue a block write from `src` / a block read into `dst` (block_bytes, 4096-aligned).
  // `done` runs on the completion thread with OK, or the error (a short transfer is
  // DataLoss; ENOSPC is ResourceExhausted; other errors are Internal with errno's text).
  void Write(const SsdLocation& loc, const std::byte* src, Callback done);
  void Read(const SsdLocation& loc, std::byte* dst, Callback done);
  // The same for the block's first `bytes` only (a positive multiple of 4096, at most
  // block_bytes): a chunk's header page. InvalidArgument for another size.
  void Write(const SsdLocation& loc, const std::byte* src, int64_t bytes, Callback done);
  void Read(const SsdLocation& loc, std::byte* dst, int64_t bytes, Callback done);
  // Makes every completed write durable (fdatasync of each file). Blocking.
  absl::Status Sync();

  // Latency samples of requests completed since the last call (bounded; oldest dropped).
  std::vector<SsdIoSample> TakeIoSamples();

  int64_t block_bytes() const;
  int64_t total_blocks() const;
  int64_t free_blocks() const;
  int64_t capacity_bytes() const { return total_blocks() * block_bytes(); }
  int64_t used_bytes() const { return (total_blocks() - free_blocks()) * block_bytes(); }
  // Whether every file was fully preallocated.
  bool preallocated() const;

  class Impl;

 private:
  explicit SsdTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SSD_TIER_H_
