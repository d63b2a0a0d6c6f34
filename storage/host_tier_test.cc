#include "storage/host_tier.h"

#include <set>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

TEST(HostTierTest, HandsOutDistinctBlocksUntilExhausted) {
  auto tier = HostTier::Create(10 * 8192 + 100, 8192);
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ((*tier)->total_blocks(), 10);
  std::set<uint32_t> seen;
  for (int i = 0; i < 10; ++i) {
    auto b = (*tier)->Allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(seen.insert(*b).second) << "block " << *b << " handed out twice";
    (*tier)->Block(*b)[8191] = std::byte{1};  // the whole block is writable
  }
  EXPECT_FALSE((*tier)->Allocate().has_value());
  EXPECT_EQ((*tier)->used_bytes(), 10 * 8192);
}

TEST(HostTierTest, FreedBlocksAreReused) {
  auto tier = HostTier::Create(2 * 4096, 4096);
  ASSERT_TRUE(tier.ok());
  uint32_t a = *(*tier)->Allocate();
  uint32_t b = *(*tier)->Allocate();
  (*tier)->Free(a);
  EXPECT_EQ((*tier)->free_blocks(), 1);
  EXPECT_EQ(*(*tier)->Allocate(), a);
  EXPECT_NE(a, b);
  EXPECT_NE((*tier)->Block(a).data(), (*tier)->Block(b).data());
}

TEST(HostTierTest, ReferencedBlockIsFreedByTheLastHolder) {
  auto tier = HostTier::Create(2 * 4096, 4096);
  ASSERT_TRUE(tier.ok());
  uint32_t a = *(*tier)->Allocate();
  (*tier)->Ref(a);  // e.g. an SSD write still reads from it
  (*tier)->Free(a);
  EXPECT_EQ((*tier)->free_blocks(), 1) << "a referenced block went back to the free list";
  (*tier)->Free(a);
  EXPECT_EQ((*tier)->free_blocks(), 2);
}

TEST(HostTierTest, ZeroCapacityHoldsNothing) {
  auto tier = HostTier::Create(0, 4096);
  ASSERT_TRUE(tier.ok());
  EXPECT_FALSE((*tier)->Allocate().has_value());
}

TEST(HostTierTest, RejectsBadSizes) {
  EXPECT_FALSE(HostTier::Create(-1, 4096).ok());
  EXPECT_FALSE(HostTier::Create(4096, 0).ok());
}

}  // namespace
}  // namespace strata::storage
