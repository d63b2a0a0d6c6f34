#include "storage/host_tier.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace strata::storage {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(int64_t capacity_bytes,
                                                           int64_t block_bytes,
                                                           bool lock_memory) {
  if (capacity_bytes < 0 || block_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("host tier needs capacity >= 0 and block > 0, got ",
                                                   capacity_bytes, " and ", block_bytes));
  }
  int64_t blocks = capacity_bytes / block_bytes;
  int64_t arena_bytes = blocks * block_bytes;
  std::byte* arena = nullptr;
  std::byte* mapping = nullptr;
  size_t mapping_bytes = 0;
  if (arena_bytes > 0) {
    // Over-map by one huge page and start the arena on a huge-page boundary, so the kernel
    // can back it with transparent huge pages: fewer TLB misses for chunk copies, and a
    // block is a few physically contiguous runs, so an O_DIRECT transfer needs few DMA
    // segments (a 1 MiB block of 4 KiB pages exceeds a virtio disk's 254 and is split).
    mapping_bytes = static_cast<size_t>(arena_bytes) + kHugePage;
    void* p = mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot map a host arena of ", arena_bytes,
                                                       " bytes: ", std::strerror(errno)));
    }
    mapping = static_cast<std::byte*>(p);
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
    arena = reinterpret_cast<std::byte*>(aligned);
    // Advice only: where THP is off, the arena simply stays in 4 KiB pages.
    (void)madvise(arena, static_cast<size_t>(arena_bytes), MADV_HUGEPAGE);
  }
  auto tier = std::unique_ptr<HostTier>(new HostTier(arena, arena_bytes, block_bytes, blocks));
  tier->mapping_ = mapping;
  tier->mapping_bytes_ = mapping_bytes;
  if (lock_memory && arena_bytes > 0) {
    if (mlock(arena, static_cast<size_t>(arena_bytes)) == 0) {
      tier->locked_ = true;
    } else {
      LOG(WARNING) << "cannot lock the host arena of " << arena_bytes << " bytes in memory ("
                   << std::strerror(errno) << "); raise the memlock limit (ulimit -l) to pin it";
    }
  }
  return tier;
}

HostTier::HostTier(std::byte* arena, int64_t arena_bytes, int64_t block_bytes, int64_t blocks)
    : arena_(arena), arena_bytes_(arena_bytes), block_bytes_(block_bytes), total_blocks_(blocks) {
  free_.reserve(static_cast<size_t>(blocks));
  refs_.assign(static_cast<size_t>(blocks), 0);
  // Lowest indices on top so that a fresh tier fills from the start of the arena.
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<uint32_t>(b));
}

HostTier::~HostTier() {
  if (locked_) munlock(arena_, static_cast<size_t>(arena_bytes_));
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

std::optional<uint32_t> HostTier::Allocate() {
  if (free_.empty()) return std::nullopt;
  uint32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void HostTier::Ref(uint32_t block) { ++refs_[block]; }

void HostTier::Free(uint32_t block) {
  if (--refs_[block] == 0) free_.push_back(block);
}

absl::Span<std::byte> HostTier::Block(uint32_t block) {
  return absl::Span<std::byte>(arena_ + static_cast<int64_t>(block) * block_bytes_,
                               static_cast<size_t>(block_bytes_));
}

}  // namespace strata::storage
