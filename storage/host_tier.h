// HostTier: the host-memory tier, one arena carved into fixed-size chunk blocks.
//
// The arena is reserved once at start (mmap, lazily committed, on a 2 MiB boundary and
// advised to use transparent huge pages) and never grows; blocks
// are handed out from a free list, so nothing on the hot path calls malloc. Not
// thread-safe: the owner (SessionStore) serialises all calls.
#ifndef STRATA_STORAGE_HOST_TIER_H_
#define STRATA_STORAGE_HOST_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata::storage {

class HostTier {
 public:
  // Reserves room for floor(capacity_bytes / block_bytes) blocks, page-aligned. With
  // `lock_memory` the arena is committed and locked (mlock) so it is never paged out and
  // DMA (io_uring fixed buffers, CUDA copies) can use it; where the OS refuses (memlock
  // limit), the tier logs it and runs unlocked. Returns InvalidArgument for a
  // non-positive size, ResourceExhausted when the arena cannot be mapped.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(int64_t capacity_bytes,
                                                          int64_t block_bytes,
                                                          bool lock_memory = false);
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // A free block holding one reference, or nullopt when every block is in use.
  std::optional<uint32_t> Allocate();
  // Adds a reference to an allocated block (e.g. an SSD write reading from it).
  void Ref(uint32_t block);
  // Drops a reference; the block returns to the free list when none is left. The block
  // must have come from Allocate().
  void Free(uint32_t block);
  // The bytes of `block`, valid for the life of the tier.
  absl::Span<std::byte> Block(uint32_t block);

  // The arena (for registering it with io_uring or CUDA as one pinned range).
  std::byte* arena_base() const { return arena_; }
  int64_t arena_bytes() const { return arena_bytes_; }
  // Whether the arena is locked in memory (Create's `lock_memory`, when the OS allowed it).
  bool locked() const { return locked_; }

  int64_t block_bytes() const { return block_bytes_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t capacity_bytes() const { return total_blocks_ * block_bytes_; }
  int64_t used_bytes() const { return (total_blocks_ - free_blocks()) * block_bytes_; }

 private:
  HostTier(std::byte* arena, int64_t arena_bytes, int64_t block_bytes, int64_t blocks);

  std::byte* arena_;
  int64_t arena_bytes_;
  bool locked_ = false;
  std::byte* mapping_ = nullptr;  // the whole mmap; the arena starts at its first huge page
  size_t mapping_bytes_ = 0;
  int64_t block_bytes_;
  int64_t total_blocks_;
  std::vector<uint32_t> free_;  // stack of free block indices
  std::vector<uint16_t> refs_;  // references held on each block
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_HOST_TIER_H_
