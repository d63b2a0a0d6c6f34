#include "storage/chunk_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace strata::storage {
namespace {

constexpr int64_t kPageBytes = 4096;

uint64_t HeaderChecksum(const ChunkHeader& h) {
  return XXH3_64bits(&h, offsetof(ChunkHeader, header_checksum));
}

}  // namespace

absl::Status ChunkLayout::Validate() const {
  if (layers <= 0 || chunk_tokens <= 0 || row_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk layout needs positive layers, chunk_tokens and row_bytes; got ",
                     layers, ", ", chunk_tokens, ", ", row_bytes));
  }
  return absl::OkStatus();
}

int64_t ChunkLayout::BlockBytes() const {
  int64_t bytes = kChunkHeaderBytes + PayloadBytes();
  return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

void WriteChunkHeader(const ChunkLayout& layout, uint64_t model_fingerprint, int tokens,
                      absl::Span<std::byte> block) {
  ChunkHeader h{};
  h.magic = kChunkMagic;
  h.version = kChunkFormatVersion;
  h.flags = kChunkUnsealed;
  h.model_fingerprint = model_fingerprint;
  h.tokens = static_cast<uint32_t>(tokens);
  h.layers = static_cast<uint32_t>(layout.layers);
  h.chunk_tokens = static_cast<uint32_t>(layout.chunk_tokens);
  h.row_bytes = static_cast<uint64_t>(layout.row_bytes);
  h.payload_checksum = 0;
  h.header_checksum = HeaderChecksum(h);
  std::memset(block.data(), 0, kChunkHeaderBytes);
  std::memcpy(block.data(), &h, sizeof(h));
}

uint64_t ChunkPayloadChecksum(const ChunkLayout& layout, absl::Span<const std::byte> block) {
  return XXH3_64bits(ChunkPayload(block), static_cast<size_t>(layout.PayloadBytes()));
}

void SealChunkHeader(absl::Span<std::byte> block, uint64_t payload_checksum) {
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  h.flags = static_cast<uint16_t>(h.flags & ~kChunkUnsealed);
  h.payload_checksum = payload_checksum;
  h.header_checksum = HeaderChecksum(h);
  std::memcpy(block.data(), &h, sizeof(h));
}

void SealChunk(const ChunkLayout& layout, uint64_t model_fingerprint, int tokens,
               absl::Span<std::byte> block) {
  WriteChunkHeader(layout, model_fingerprint, tokens, block);
  SealChunkHeader(block, ChunkPayloadChecksum(layout, block));
}

absl::Status VerifyChunkHeader(const ChunkLayout& layout, uint64_t model_fingerprint,
                               absl::Span<const std::byte> block, ChunkHeaderFacts* facts) {
  if (static_cast<int64_t>(block.size()) < kChunkHeaderBytes + layout.PayloadBytes()) {
    return absl::DataLossError("chunk block is shorter than its layout");
  }
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  if (h.magic != kChunkMagic) return absl::DataLossError("chunk magic number mismatch");
  if (h.header_checksum != HeaderChecksum(h)) {
    return absl::DataLossError("chunk header checksum mismatch");
  }
  if (h.version != kChunkFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk format version ", h.version, " is not ", kChunkFormatVersion));
  }
  if ((h.flags & ~kChunkUnsealed) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("chunk carries unknown flags ", h.flags));
  }
  if (h.model_fingerprint != model_fingerprint) {
    return absl::FailedPreconditionError("chunk was written by another model (fingerprint)");
  }
  if (h.layers != static_cast<uint32_t>(layout.layers) ||
      h.chunk_tokens != static_cast<uint32_t>(layout.chunk_tokens) ||
      h.row_bytes != static_cast<uint64_t>(layout.row_bytes)) {
    return absl::FailedPreconditionError("chunk layout differs from the store's");
  }
  if (h.tokens == 0 || h.tokens > h.chunk_tokens) {
    return absl::DataLossError(absl::StrCat("chunk claims ", h.tokens, " tokens"));
  }
  if (facts != nullptr) {
    facts->tokens = static_cast<int>(h.tokens);
    facts->sealed = (h.flags & kChunkUnsealed) == 0;
    facts->payload_checksum = h.payload_checksum;
  }
  return absl::OkStatus();
}

absl::Status VerifyChunk(const ChunkLayout& layout, uint64_t model_fingerprint,
                         absl::Span<const std::byte> block, int* tokens) {
  ChunkHeaderFacts facts;
  if (absl::Status s = VerifyChunkHeader(layout, model_fingerprint, block, &facts); !s.ok()) return s;
  if (!facts.sealed) return absl::DataLossError("chunk payload was never sealed");
  if (ChunkPayloadChecksum(layout, block) != facts.payload_checksum) {
    return absl::DataLossError("chunk payload checksum mismatch");
  }
  if (tokens != nullptr) *tokens = facts.tokens;
  return absl::OkStatus();
}

}  // namespace strata::storage
