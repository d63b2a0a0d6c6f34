#include "storage/chunk_format.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "xxhash.h"

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

TEST(ChunkFormatTest, SealedChunkIsVersionTwoWithFlagsZeroAndNoDescriptor) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 7);
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  EXPECT_EQ(h.version, 2);
  EXPECT_EQ(h.flags, 0);
  EXPECT_EQ(h.descriptor_bytes, 0u);
  EXPECT_EQ(h.payload_checksum, ChunkPayloadChecksum(layout, block));
  // Sealing two-step gives the same bytes as SealChunk.
  std::vector<std::byte> two_step = block;
  std::memset(two_step.data(), 0x5a, static_cast<size_t>(kChunkHeaderBytes));
  WriteChunkHeader(layout, 42, 7, absl::Span<std::byte>(two_step));
  SealChunkHeader(absl::Span<std::byte>(two_step), ChunkPayloadChecksum(layout, two_step));
  EXPECT_TRUE(two_step == block);
}

// Chunks on disk from before the descriptor (format 1: the reserved field zero, the
// checksum over the header alone) are still served through the index; they carry nothing
// to rebuild it from.
TEST(ChunkFormatTest, VersionOneChunksStillVerifyButCarryNoDescriptor) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 7);
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  h.version = 1;
  h.header_checksum = XXH3_64bits(&h, offsetof(ChunkHeader, header_checksum));
  std::memcpy(block.data(), &h, sizeof(h));
  int tokens = 0;
  ASSERT_TRUE(VerifyChunk(layout, 42, block, &tokens).ok());
  EXPECT_EQ(tokens, 7);
  auto page = ReadChunkHeaderPage(layout, 42, absl::Span<const std::byte>(block).subspan(0, kChunkHeaderBytes));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_FALSE(page->descriptor.has_value());
}

ChunkDescriptor DescriptorOf(int chunk_tokens, int session_tokens, int chunk_index) {
  ChunkDescriptor d;
  d.tenant = "tenant";
  d.session_id = "session-7";
  d.base = "sp:1234";
  d.generation = 1700000000123456;
  d.last_access_unix_ms = 1700000000123;
  d.session_tokens = static_cast<uint32_t>(session_tokens);
  d.chunk_index = static_cast<uint32_t>(chunk_index);
  d.chunk_count = static_cast<uint32_t>((session_tokens + chunk_tokens - 1) / chunk_tokens);
  const int first = chunk_index * chunk_tokens;
  for (int t = first; t < std::min(session_tokens, first + chunk_tokens); ++t) d.tokens.push_back(t * 31 - 5);
  return d;
}

absl::Span<const std::byte> Page(const std::vector<std::byte>& block) {
  return absl::Span<const std::byte>(block).subspan(0, kChunkHeaderBytes);
}

TEST(ChunkFormatTest, ADescriptorRoundTripsThroughTheHeaderPage) {
  ChunkLayout layout = SmallLayout();       // 16 tokens a chunk
  auto block = FilledBlock(layout, 42, 9);  // the last chunk of a 41-token version
  const ChunkDescriptor d = DescriptorOf(16, 41, 2);
  const uint64_t checksum = ChunkPayloadChecksum(layout, block);
  ASSERT_TRUE(SealChunkHeader(absl::Span<std::byte>(block), checksum, d));
  ASSERT_TRUE(VerifyChunk(layout, 42, block, nullptr).ok());
  auto page = ReadChunkHeaderPage(layout, 42, Page(block));
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_TRUE(page->descriptor.has_value());
  EXPECT_EQ(*page->descriptor, d);
  EXPECT_EQ(page->facts.tokens, 9);
  EXPECT_EQ(page->facts.payload_checksum, checksum);
  // Sealed again (a kept chunk's checksum recorded anew), it keeps its descriptor.
  SealChunkHeader(absl::Span<std::byte>(block), checksum);
  EXPECT_EQ(ReadChunkHeaderPage(layout, 42, Page(block))->descriptor, d);
  // A later version's descriptor replaces it whole: the page holds nothing of the old one.
  ChunkDescriptor shorter = DescriptorOf(16, 41, 2);
  shorter.tenant = "t";
  shorter.base.clear();
  ASSERT_TRUE(SealChunkHeader(absl::Span<std::byte>(block), checksum, shorter));
  EXPECT_EQ(ReadChunkHeaderPage(layout, 42, Page(block))->descriptor, shorter);
  const int64_t used = static_cast<int64_t>(sizeof(ChunkHeader)) + ChunkDescriptorBytes(shorter);
  for (int64_t i = used; i < kChunkHeaderBytes; ++i) ASSERT_EQ(block[i], std::byte{0}) << "byte " << i;
}

TEST(ChunkFormatTest, EveryFlippedByteOfADescriptorIsDataLoss) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  const ChunkDescriptor d = DescriptorOf(16, 40, 1);
  ASSERT_TRUE(SealChunkHeader(absl::Span<std::byte>(block), ChunkPayloadChecksum(layout, block), d));
  const size_t end = sizeof(ChunkHeader) + static_cast<size_t>(ChunkDescriptorBytes(d));
  for (size_t i = sizeof(ChunkHeader); i < end; ++i) {
    std::vector<std::byte> bad = block;
    bad[i] ^= std::byte{0x10};
    EXPECT_TRUE(absl::IsDataLoss(ReadChunkHeaderPage(layout, 42, Page(bad)).status())) << "byte " << i;
    EXPECT_TRUE(absl::IsDataLoss(VerifyChunkHeader(layout, 42, bad, nullptr))) << "byte " << i;
  }
}

TEST(ChunkFormatTest, ADescriptorThatDisagreesWithItsHeaderIsDataLoss) {
  ChunkLayout layout = SmallLayout();
  auto block = FilledBlock(layout, 42, 16);
  ChunkDescriptor d = DescriptorOf(16, 40, 1);
  d.chunk_count = 2;  // 40 tokens make 3 chunks
  ASSERT_TRUE(SealChunkHeader(absl::Span<std::byte>(block), ChunkPayloadChecksum(layout, block), d));
  EXPECT_TRUE(absl::IsDataLoss(ReadChunkHeaderPage(layout, 42, Page(block)).status()));
  d = DescriptorOf(16, 40, 2);  // the last chunk holds 8 tokens, the header says 16
  d.tokens.resize(16);
  ASSERT_TRUE(SealChunkHeader(absl::Span<std::byte>(block), ChunkPayloadChecksum(layout, block), d));
  EXPECT_TRUE(absl::IsDataLoss(ReadChunkHeaderPage(layout, 42, Page(block)).status()));
}

TEST(ChunkFormatTest, ADescriptorThatDoesNotFitThePageIsLeftOut) {
  EXPECT_EQ(MaxDescribedChunkTokens(0), (kChunkHeaderBytes - 56 - 36) / 4);
  ChunkLayout layout{.layers = 1, .chunk_tokens = 1500, .row_bytes = 4};
  auto block = FilledBlock(layout, 42, 1500);
  const ChunkDescriptor d = DescriptorOf(1500, 3000, 0);
  EXPECT_GT(ChunkDescriptorBytes(d), kChunkDescriptorMaxBytes);
  EXPECT_FALSE(SealChunkHeader(absl::Span<std::byte>(block), ChunkPayloadChecksum(layout, block), d));
  ASSERT_TRUE(VerifyChunk(layout, 42, block, nullptr).ok()) << "a chunk without a descriptor is still a chunk";
  auto page = ReadChunkHeaderPage(layout, 42, Page(block));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_FALSE(page->descriptor.has_value());
}

TEST(ChunkFormatTest, APageWithoutAChunkIsNotFoundAndAnUnsealedOneIsDataLoss) {
  ChunkLayout layout = SmallLayout();
  std::vector<std::byte> block(static_cast<size_t>(layout.BlockBytes()), std::byte{0});
  EXPECT_TRUE(absl::IsNotFound(ReadChunkHeaderPage(layout, 42, Page(block)).status()));
  EXPECT_TRUE(absl::IsDataLoss(VerifyChunkHeader(layout, 42, block, nullptr))) << "where a chunk was expected";
  WriteChunkHeader(layout, 42, 5, absl::Span<std::byte>(block));
  EXPECT_TRUE(absl::IsDataLoss(ReadChunkHeaderPage(layout, 42, Page(block)).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadChunkHeaderPage(layout, 43, Page(block)).status()));
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

// Each plane's rows past the chunk's tokens are zeroed; its first rows and the header are
// left as they were; a full chunk is left whole.
TEST(ChunkFormatTest, ZeroRowsPastClearsEachPlanesUnusedRowsOnly) {
  const ChunkLayout layout{.layers = 3, .chunk_tokens = 8, .row_bytes = 16};
  std::vector<std::byte> block(static_cast<size_t>(layout.BlockBytes()), std::byte{0xab});
  ZeroRowsPast(layout, 8, absl::MakeSpan(block));
  EXPECT_TRUE(std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0xab}; }));
  ZeroRowsPast(layout, 5, absl::MakeSpan(block));
  const std::byte* payload = ChunkPayload(absl::MakeSpan(block));
  for (int64_t i = 0; i < static_cast<int64_t>(kChunkHeaderBytes); ++i) ASSERT_EQ(block[static_cast<size_t>(i)], std::byte{0xab});
  for (int l = 0; l < layout.layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int t = 0; t < layout.chunk_tokens; ++t) {
        const std::byte want = t < 5 ? std::byte{0xab} : std::byte{0};
        for (int64_t b = 0; b < layout.row_bytes; ++b) {
          ASSERT_EQ(payload[layout.RowOffset(l, kv, t) + b], want) << "layer " << l << " kv " << kv << " row " << t;
        }
      }
    }
  }
}

TEST(ChunkFormatTest, InvalidLayoutIsRejected) {
  EXPECT_FALSE((ChunkLayout{.layers = 0, .chunk_tokens = 16, .row_bytes = 8}).Validate().ok());
  EXPECT_TRUE(SmallLayout().Validate().ok());
}

}  // namespace
}  // namespace strata::storage
