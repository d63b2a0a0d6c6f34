#include "storage/chunk_format.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

ChunkLayout SmallLayout() { return ChunkLayout{.layers = 3, .chunk_tokens = 16, .row_bytes = 64}; }

std::vector<std::byte> FilledBlock(const ChunkLayout& layout, uint64_t fingerprint, int tokens) {
  std::vector<std::byte> block(static_cast<size_t>(layout.BlockBytes()));
  absl::Span<std::byte> span(block);
  std::byte* payload = ChunkPayload(span);
  for (int64_t i = 0; i < layout.PayloadBytes(); ++i) payload[i] = static_cast<std::byte>(i * 7 + 3);
  SealChunk(layout, fingerprint, tokens, span);
  return block;
}

TEST(ChunkFormatTest, RoundTripVerifies) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 9);
  int tokens = 0;
  ASSERT_TRUE(VerifyChunk(layout, 42, block, &tokens).ok());
  EXPECT_EQ(tokens, 9);
  EXPECT_EQ(ChunkPayload(absl::Span<const std::byte>(block))[5], static_cast<std::byte>(5 * 7 + 3));
}

TEST(ChunkFormatTest, LayoutIsLayerMajorAndPageAligned) {
  ChunkLayout layout = SmallLayout();
  EXPECT_EQ(layout.RowOffset(0, 0, 0), 0);
  EXPECT_EQ(layout.RowOffset(0, 1, 0), 16 * 64);         // V of layer 0 follows its K
  EXPECT_EQ(layout.RowOffset(1, 0, 0), 2 * 16 * 64);     // layer 1 follows layer 0
  EXPECT_EQ(layout.RowOffset(2, 1, 15), (5 * 16 + 15) * 64);
  EXPECT_EQ(layout.BlockBytes() % 4096, 0);
  EXPECT_GE(layout.BlockBytes(), kChunkHeaderBytes + layout.PayloadBytes());
}

TEST(ChunkFormatTest, CorruptPayloadIsDataLoss) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  block[kChunkHeaderBytes + 100] ^= std::byte{1};
  absl::Status s = VerifyChunk(layout, 42, block, nullptr);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST(ChunkFormatTest, CorruptHeaderIsDataLoss) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  block[offsetof(ChunkHeader, tokens)] ^= std::byte{2};
  EXPECT_TRUE(absl::IsDataLoss(VerifyChunk(layout, 42, block, nullptr)));
  block[0] ^= std::byte{0xff};
  EXPECT_TRUE(absl::IsDataLoss(VerifyChunk(layout, 42, block, nullptr)));
}

TEST(ChunkFormatTest, WrongFingerprintIsRefused) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  absl::Status s = VerifyChunk(layout, 43, block, nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
}

TEST(ChunkFormatTest, OtherLayoutIsRefused) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  ChunkLayout other = layout;
  other.row_bytes = 32;
  EXPECT_TRUE(absl::IsFailedPrecondition(VerifyChunk(other, 42, block, nullptr)));
}

TEST(ChunkFormatTest, InvalidLayoutIsRejected) {
  EXPECT_FALSE((ChunkLayout{.layers = 0, .chunk_tokens = 16, .row_bytes = 8}).Validate().ok());
  EXPECT_TRUE(SmallLayout().Validate().ok());
}

}  // namespace
}  // namespace strata::storage
