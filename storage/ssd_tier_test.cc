#include "storage/ssd_tier.h"

#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <set>
#include <vector>

#include "base/mutex.h"
#include "storage/io_batch.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"

namespace strata::storage {
namespace {

constexpr int64_t kBlock = 8192;

struct AlignedFree {
  void operator()(std::byte* p) const { free(p); }
};
using Buffer = std::unique_ptr<std::byte[], AlignedFree>;

Buffer Aligned(int64_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(posix_memalign(&p, 4096, static_cast<size_t>(bytes)), 0);
  return Buffer(static_cast<std::byte*>(p));
}


class SsdTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<SsdTier> Open(int dirs, int64_t blocks_per_dir, int queue_depth = 8) {
    SsdTierOptions o;
    for (int d = 0; d < dirs; ++d) o.dirs.push_back(dir_ / ("d" + std::to_string(d)));
    o.capacity_bytes_per_dir = blocks_per_dir * kBlock + 100;  // rounded down to whole blocks
    o.block_bytes = kBlock;
    o.queue_depth = queue_depth;
    auto t = SsdTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  testing::TempDir dir_{"strata-ssd"};
};

TEST_F(SsdTierTest, PreallocatesAndHandsOutEveryBlockOnceAcrossFiles) {
  auto tier = Open(2, 4);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->preallocated());
  EXPECT_EQ(tier->total_blocks(), 8);
  EXPECT_EQ(tier->capacity_bytes(), 8 * kBlock);
  std::set<std::pair<uint32_t, uint64_t>> seen;
  std::set<uint32_t> files;
  for (int i = 0; i < 8; ++i) {
    auto loc = tier->Allocate();
    ASSERT_TRUE(loc.has_value());
    EXPECT_TRUE(seen.insert({loc->file, loc->offset}).second);
    files.insert(loc->file);
    EXPECT_EQ(loc->offset % kBlock, 0u);
  }
  EXPECT_EQ(files.size(), 2u) << "both files are used";
  EXPECT_FALSE(tier->Allocate().has_value()) << "exhausted";
  EXPECT_EQ(tier->free_blocks(), 0);
  EXPECT_EQ(tier->used_bytes(), 8 * kBlock);
}

TEST_F(SsdTierTest, FreedHolesAreReusedLowestFirst) {
  auto tier = Open(1, 8);
  ASSERT_NE(tier, nullptr);
  std::vector<SsdLocation> locs;
  for (int i = 0; i < 8; ++i) locs.push_back(*tier->Allocate());
  // Consecutive allocations are consecutive blocks: a session's chunks form one extent.
  for (int i = 1; i < 8; ++i) EXPECT_EQ(locs[i].offset, locs[i - 1].offset + kBlock);
  tier->Free(locs[5]);
  tier->Free(locs[1]);
  tier->Free(locs[3]);
  EXPECT_EQ(tier->free_blocks(), 3);
  EXPECT_EQ(tier->Allocate()->offset, locs[1].offset);
  EXPECT_EQ(tier->Allocate()->offset, locs[3].offset);
  EXPECT_EQ(tier->Allocate()->offset, locs[5].offset);
  EXPECT_FALSE(tier->Allocate().has_value());
}

TEST_F(SsdTierTest, MarkAllocatedRejectsBadAndTakenLocations) {
  auto tier = Open(1, 4);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->MarkAllocated({0, 2 * kBlock}));
  EXPECT_FALSE(tier->MarkAllocated({0, 2 * kBlock})) << "already in use";
  EXPECT_FALSE(tier->MarkAllocated({0, 4 * kBlock})) << "past the end";
  EXPECT_FALSE(tier->MarkAllocated({0, 100})) << "not block-aligned";
  EXPECT_FALSE(tier->MarkAllocated({1, 0})) << "no such file";
  EXPECT_EQ(tier->free_blocks(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_NE(tier->Allocate()->offset, uint64_t{2 * kBlock});
}

// A chunk's header page is read and written on its own (an index rebuild reads headers
// only; retiring a block erases its header only), and nothing else of the block changes.
// A submit that fails (EBUSY, say) leaves its requests in the ring with nothing else to
// submit them: the completion thread submits them again, so they complete (and the tier's
// destructor, which waits for them, returns).
TEST_F(SsdTierTest, RequestsAFailedSubmitLeftBehindComplete) {
  SsdTierOptions o;
  o.dirs = {dir_ / "d0"};
  o.capacity_bytes_per_dir = 4 * kBlock;
  o.block_bytes = kBlock;
  o.failed_submits_for_testing = 2;
  auto tier = SsdTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  Buffer block = Aligned(kBlock), back = Aligned(kBlock);
  for (int64_t i = 0; i < kBlock; ++i) block[i] = static_cast<std::byte>(i % 249 + 3);
  std::promise<absl::Status> written, read;
  (*tier)->Write({0, 0}, block.get(), [&](absl::Status s) { written.set_value(s); });
  auto w = written.get_future();
  ASSERT_EQ(w.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "a request a failed submit left hangs";
  ASSERT_TRUE(w.get().ok());
  (*tier)->Read({0, 0}, back.get(), [&](absl::Status s) { read.set_value(s); });
  auto r = read.get_future();
  ASSERT_EQ(r.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "a request a failed submit left hangs";
  ASSERT_TRUE(r.get().ok());
  EXPECT_EQ(std::memcmp(block.get(), back.get(), kBlock), 0);
}

TEST_F(SsdTierTest, AHeaderPageIsReadAndWrittenOnItsOwn) {
  auto tier = Open(1, 4);
  ASSERT_NE(tier, nullptr);
  const SsdLocation loc{0, kBlock};
  Buffer block = Aligned(kBlock);
  for (int64_t i = 0; i < kBlock; ++i) block[i] = static_cast<std::byte>(i % 251 + 1);
  IoBatch write;
  tier->Write(loc, block.get(), write.Callback());
  ASSERT_TRUE(write.Wait().ok());
  Buffer zeros = Aligned(4096);
  std::memset(zeros.get(), 0, 4096);
  IoBatch erase;
  tier->Write(loc, zeros.get(), 4096, erase.Callback());
  ASSERT_TRUE(erase.Wait().ok());
  Buffer back = Aligned(kBlock);
  IoBatch read;
  tier->Read(loc, back.get(), read.Callback());
  ASSERT_TRUE(read.Wait().ok());
  for (int64_t i = 0; i < 4096; ++i) ASSERT_EQ(back[i], std::byte{0}) << "byte " << i;
  for (int64_t i = 4096; i < kBlock; ++i) ASSERT_EQ(back[i], block[i]) << "byte " << i << " past the page changed";
  Buffer page = Aligned(4096);
  std::memset(page.get(), 0x77, 4096);
  IoBatch read_page;
  tier->Read(SsdLocation{0, kBlock}, page.get(), 4096, read_page.Callback());
  ASSERT_TRUE(read_page.Wait().ok());
  EXPECT_EQ(page[4095], std::byte{0});
  // Only whole pages of a block.
  for (int64_t bad : {int64_t{0}, int64_t{100}, 2 * kBlock}) {
    IoBatch refused;
    tier->Read(loc, back.get(), bad, refused.Callback());
    EXPECT_TRUE(absl::IsInvalidArgument(refused.Wait())) << bad << " bytes";
  }
}

// The blocks a rebuild scans: those the files held when the tier was opened.
TEST_F(SsdTierTest, LocationsFoundAtOpenAreTheBlocksTheFilesHeld) {
  {
    auto tier = Open(2, 3);
    ASSERT_NE(tier, nullptr);
    EXPECT_TRUE(tier->LocationsFoundAtOpen().empty()) << "new files hold nothing";
  }
  auto tier = Open(2, 3);
  ASSERT_NE(tier, nullptr);
  const std::vector<SsdLocation> found = tier->LocationsFoundAtOpen();
  ASSERT_EQ(found.size(), 6u);
  EXPECT_EQ(found[0], (SsdLocation{0, 0}));
  EXPECT_EQ(found[2], (SsdLocation{0, 2 * kBlock}));
  EXPECT_EQ(found[5], (SsdLocation{1, 2 * kBlock}));
}

TEST_F(SsdTierTest, WritesAndReadsBackThroughRegisteredAndPlainBuffers) {
  auto tier = Open(2, 16, /*queue_depth=*/4);  // more requests than ring slots
  ASSERT_NE(tier, nullptr);
  constexpr int kBlocks = 24;
  Buffer arena = Aligned(kBlocks * kBlock);
  ASSERT_TRUE(tier->RegisterBuffers(arena.get(), kBlocks * kBlock).ok());
  for (int64_t i = 0; i < kBlocks * kBlock; ++i) arena[i] = static_cast<std::byte>((i * 7 + i / kBlock) & 0xff);
  std::vector<SsdLocation> locs;
  IoBatch writes;
  for (int b = 0; b < kBlocks; ++b) {
    locs.push_back(*tier->Allocate());
    tier->Write(locs[b], arena.get() + b * kBlock, writes.Callback());
  }
  ASSERT_TRUE(writes.Wait().ok());
  ASSERT_TRUE(tier->Sync().ok());
  // Read back into a buffer that is not registered, and into the registered one.
  Buffer plain = Aligned(kBlocks * kBlock);
  IoBatch reads;
  for (int b = 0; b < kBlocks; ++b) tier->Read(locs[b], plain.get() + b * kBlock, reads.Callback());
  ASSERT_TRUE(reads.Wait().ok());
  EXPECT_EQ(std::memcmp(plain.get(), arena.get(), kBlocks * kBlock), 0);
  std::memset(arena.get(), 0, kBlocks * kBlock);
  IoBatch fixed_reads;
  for (int b = 0; b < kBlocks; ++b) tier->Read(locs[b], arena.get() + b * kBlock, fixed_reads.Callback());
  ASSERT_TRUE(fixed_reads.Wait().ok());
  EXPECT_EQ(std::memcmp(plain.get(), arena.get(), kBlocks * kBlock), 0);
  std::vector<SsdIoSample> samples = tier->TakeIoSamples();
  EXPECT_EQ(samples.size(), 3u * kBlocks);
  EXPECT_TRUE(tier->TakeIoSamples().empty());
}

TEST_F(SsdTierTest, ReopenedFilesKeepTheirBytes) {
  Buffer buf = Aligned(kBlock);
  SsdLocation loc;
  {
    auto tier = Open(1, 4);
    ASSERT_NE(tier, nullptr);
    std::memset(buf.get(), 0x5a, kBlock);
    loc = *tier->Allocate();
    IoBatch w;
    tier->Write(loc, buf.get(), w.Callback());
    ASSERT_TRUE(w.Wait().ok());
    ASSERT_TRUE(tier->Sync().ok());
  }
  auto tier = Open(1, 4);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->MarkAllocated(loc));
  std::memset(buf.get(), 0, kBlock);
  IoBatch r;
  tier->Read(loc, buf.get(), r.Callback());
  ASSERT_TRUE(r.Wait().ok());
  for (int64_t i = 0; i < kBlock; ++i) ASSERT_EQ(buf[i], std::byte{0x5a}) << "byte " << i;
}

TEST_F(SsdTierTest, BadRequestsFailWithoutTouchingTheDisk) {
  auto tier = Open(1, 2);
  ASSERT_NE(tier, nullptr);
  Buffer buf = Aligned(2 * kBlock);
  IoBatch w;
  tier->Write({0, 7 * kBlock}, buf.get(), w.Callback());
  EXPECT_TRUE(absl::IsInvalidArgument(w.Wait()));
  IoBatch u;
  tier->Read({0, 0}, buf.get() + 1, u.Callback());
  EXPECT_TRUE(absl::IsInvalidArgument(u.Wait()));
}

TEST_F(SsdTierTest, BadOptionsAreRefused) {
  SsdTierOptions o;
  o.dirs = {dir_ / "x"};
  o.block_bytes = 1000;  // not a multiple of 4096
  o.capacity_bytes_per_dir = 1 << 20;
  EXPECT_TRUE(absl::IsInvalidArgument(SsdTier::Open(o).status()));
  o.block_bytes = kBlock;
  o.capacity_bytes_per_dir = kBlock - 1;
  EXPECT_TRUE(absl::IsInvalidArgument(SsdTier::Open(o).status()));
  o.capacity_bytes_per_dir = kBlock;
  o.dirs = {};
  EXPECT_TRUE(absl::IsInvalidArgument(SsdTier::Open(o).status()));
}

}  // namespace
}  // namespace strata::storage
