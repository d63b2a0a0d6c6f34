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

TEST(ChunkFormatTest, HeaderCheckDoesNotReadThePayload) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  block[kChunkHeaderBytes + 100] ^= std::byte{1};
  ChunkHeaderFacts facts;
  absl::Status s = VerifyChunkHeader(layout, 42, block, &facts);
  EXPECT_TRUE(s.ok()) << "a header check must pass a payload it does not read: " << s;
  EXPECT_EQ(facts.tokens, 16);
  EXPECT_TRUE(facts.sealed);
  EXPECT_TRUE(absl::IsDataLoss(VerifyChunk(layout, 42, block, nullptr)));
}

TEST(ChunkFormatTest, HeaderCheckCatchesWhatTheFullCheckCatchesInTheHeader) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  EXPECT_TRUE(absl::IsFailedPrecondition(VerifyChunkHeader(layout, 43, block, nullptr)));
  ChunkLayout other = layout;
  other.layers = 4;
  EXPECT_TRUE(absl::IsFailedPrecondition(VerifyChunkHeader(other, 42, block, nullptr)));
  block[offsetof(ChunkHeader, tokens)] ^= std::byte{2};
  EXPECT_TRUE(absl::IsDataLoss(VerifyChunkHeader(layout, 42, block, nullptr)));
}

TEST(ChunkFormatTest, UnsealedChunkPassesTheHeaderCheckOnlyUntilSealed) {
  ChunkLayout layout = SmallLayout();
  std::vector<std::byte> block(static_cast<size_t>(layout.BlockBytes()), std::byte{9});
  WriteChunkHeader(layout, 42, 5, absl::Span<std::byte>(block));
  ChunkHeaderFacts facts;
  ASSERT_TRUE(VerifyChunkHeader(layout, 42, block, &facts).ok());
  EXPECT_FALSE(facts.sealed);
  EXPECT_EQ(facts.tokens, 5);
  absl::Status s = VerifyChunk(layout, 42, block, nullptr);
  EXPECT_TRUE(absl::IsDataLoss(s)) << "an unsealed chunk must never verify as a disk chunk: " << s;
  const uint64_t checksum = ChunkPayloadChecksum(layout, block);
  SealChunkHeader(absl::Span<std::byte>(block), checksum);
  int tokens = 0;
  ASSERT_TRUE(VerifyChunk(layout, 42, block, &tokens).ok());
  EXPECT_EQ(tokens, 5);
  ASSERT_TRUE(VerifyChunkHeader(layout, 42, block, &facts).ok());
  EXPECT_TRUE(facts.sealed);
  EXPECT_EQ(facts.payload_checksum, checksum);
}

TEST(ChunkFormatTest, SealedChunkIsTheVersionOneFormatWithFlagsZero) {
  // Chunks on disk from before the unsealed flag had a zero reserved field here; a sealed
  // chunk must be byte for byte what that writer wrote.
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 7);
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  EXPECT_EQ(h.version, 1);
  EXPECT_EQ(h.flags, 0);
  EXPECT_EQ(h.payload_checksum, ChunkPayloadChecksum(layout, block));
  // Sealing two-step gives the same bytes as SealChunk.
  std::vector<std::byte> two_step = block;
  std::memset(two_step.data(), 0x5a, static_cast<size_t>(kChunkHeaderBytes));
  WriteChunkHeader(layout, 42, 7, absl::Span<std::byte>(two_step));
  SealChunkHeader(absl::Span<std::byte>(two_step), ChunkPayloadChecksum(layout, two_step));
  EXPECT_TRUE(two_step == block);
}

TEST(ChunkFormatTest, UnknownFlagsAreRefused) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  h.flags = 4;
  std::memcpy(block.data(), &h, sizeof(h));
  SealChunkHeader(absl::Span<std::byte>(block), h.payload_checksum);  // a valid header checksum
  EXPECT_TRUE(absl::IsFailedPrecondition(VerifyChunkHeader(layout, 42, block, nullptr)));
}

TEST(ChunkFormatTest, InvalidLayoutIsRejected) {
  EXPECT_FALSE((ChunkLayout{.layers = 0, .chunk_tokens = 16, .row_bytes = 8}).Validate().ok());
  EXPECT_TRUE(SmallLayout().Validate().ok());
}

}  // namespace
}  // namespace strata::storage
