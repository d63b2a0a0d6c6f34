// HostTier: the host-memory tier, one arena carved into fixed-size chunk blocks.
//
// The arena is reserved once at start (mmap, lazily committed) and never grows; blocks
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
  // Reserves room for floor(capacity_bytes / block_bytes) blocks. Returns
  // InvalidArgument for a non-positive size, ResourceExhausted when the arena cannot be
  // mapped.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(int64_t capacity_bytes,
                                                          int64_t block_bytes);
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // A free block, or nullopt when every block is in use.
  std::optional<uint32_t> Allocate();
  // Returns `block` to the free list. The block must have come from Allocate().
  void Free(uint32_t block);
  // The bytes of `block`, valid for the life of the tier.
  absl::Span<std::byte> Block(uint32_t block);

  int64_t block_bytes() const { return block_bytes_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t capacity_bytes() const { return total_blocks_ * block_bytes_; }
  int64_t used_bytes() const { return (total_blocks_ - free_blocks()) * block_bytes_; }

 private:
  HostTier(std::byte* arena, int64_t arena_bytes, int64_t block_bytes, int64_t blocks);

  std::byte* arena_;
  int64_t arena_bytes_;
  int64_t block_bytes_;
  int64_t total_blocks_;
  std::vector<uint32_t> free_;  // stack of free block indices
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_HOST_TIER_H_
