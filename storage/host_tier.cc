#include "storage/host_tier.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata::storage {

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(int64_t capacity_bytes,
                                                           int64_t block_bytes) {
  if (capacity_bytes < 0 || block_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("host tier needs capacity >= 0 and block > 0, got ",
                                                   capacity_bytes, " and ", block_bytes));
  }
  int64_t blocks = capacity_bytes / block_bytes;
  int64_t arena_bytes = blocks * block_bytes;
  std::byte* arena = nullptr;
  if (arena_bytes > 0) {
    void* p = mmap(nullptr, static_cast<size_t>(arena_bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot map a host arena of ", arena_bytes,
                                                       " bytes: ", std::strerror(errno)));
    }
    arena = static_cast<std::byte*>(p);
  }
  return std::unique_ptr<HostTier>(new HostTier(arena, arena_bytes, block_bytes, blocks));
}

HostTier::HostTier(std::byte* arena, int64_t arena_bytes, int64_t block_bytes, int64_t blocks)
    : arena_(arena), arena_bytes_(arena_bytes), block_bytes_(block_bytes), total_blocks_(blocks) {
  free_.reserve(static_cast<size_t>(blocks));
  // Lowest indices on top so that a fresh tier fills from the start of the arena.
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<uint32_t>(b));
}

HostTier::~HostTier() {
  if (arena_ != nullptr) munmap(arena_, static_cast<size_t>(arena_bytes_));
}

std::optional<uint32_t> HostTier::Allocate() {
  if (free_.empty()) return std::nullopt;
  uint32_t b = free_.back();
  free_.pop_back();
  return b;
}

void HostTier::Free(uint32_t block) { free_.push_back(block); }

absl::Span<std::byte> HostTier::Block(uint32_t block) {
  return absl::Span<std::byte>(arena_ + static_cast<int64_t>(block) * block_bytes_,
                               static_cast<size_t>(block_bytes_));
}

}  // namespace strata::storage
