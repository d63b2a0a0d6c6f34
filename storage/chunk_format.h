// On-disk and in-memory format of one KV chunk: the unit of placement of a session's KV.
//
// A chunk holds the KV of up to `chunk_tokens` consecutive tokens of one session, for
// every layer, position-free (K is stored before RoPE). It is one block:
//
//   [ ChunkHeader, zero-padded to kChunkHeaderBytes ][ payload ]
//
// The payload is layer-major so that one layer of one chunk is one contiguous range
// (one DMA, one O_DIRECT read):
//
//   for layer in [0, layers):  K rows [chunk_tokens][row_bytes], then V rows [chunk_tokens][row_bytes]
//
// Rows past `tokens` (the last chunk of a session may be partial) are zero. The header
// carries a magic number, a format version, the model fingerprint and XXH3-64 checksums
// of the payload and of the header itself. A chunk that fails any check is a miss and is
// never served.
#ifndef STRATA_STORAGE_CHUNK_FORMAT_H_
#define STRATA_STORAGE_CHUNK_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace strata::storage {

inline constexpr uint32_t kChunkMagic = 0x56'4b'54'53;  // "STKV" little-endian
inline constexpr uint16_t kChunkFormatVersion = 1;
// The header region is one page so that the payload stays page-aligned for O_DIRECT.
inline constexpr int64_t kChunkHeaderBytes = 4096;

// Shape of a chunk's payload. Storage knows only bytes: `row_bytes` is the size of one
// token's K (equally V) in one layer, whatever the model and dtype.
struct ChunkLayout {
  int layers = 0;
  int chunk_tokens = 0;
  int64_t row_bytes = 0;

  absl::Status Validate() const;
  int64_t PayloadBytes() const { return int64_t{layers} * 2 * chunk_tokens * row_bytes; }
  // Bytes of one block: header region + payload, rounded up to a page.
  int64_t BlockBytes() const;
  // Offset in the payload of token `token`'s row of K (kv == 0) or V (kv == 1) in `layer`.
  int64_t RowOffset(int layer, int kv, int token) const {
    return ((int64_t{layer} * 2 + kv) * chunk_tokens + token) * row_bytes;
  }
  bool operator==(const ChunkLayout&) const = default;
};

struct ChunkHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  uint64_t model_fingerprint;
  uint32_t tokens;        // tokens held, 1..chunk_tokens
  uint32_t layers;
  uint32_t chunk_tokens;
  uint32_t reserved1;
  uint64_t row_bytes;
  uint64_t payload_checksum;  // XXH3-64 of the whole payload
  uint64_t header_checksum;   // XXH3-64 of the bytes above this field
};
static_assert(sizeof(ChunkHeader) == 56);

// Writes the header of a block whose payload (block + kChunkHeaderBytes) is already
// filled. `block` must hold layout.BlockBytes() bytes.
void SealChunk(const ChunkLayout& layout, uint64_t model_fingerprint, int tokens,
               absl::Span<std::byte> block);

// Checks a block before its payload is served. Returns OK when the magic, version,
// layout, fingerprint and both checksums match; FailedPrecondition when the chunk was
// written for another model (fingerprint) or layout; DataLoss when bytes are corrupt.
// On success `*tokens` (if non-null) is the number of tokens the chunk holds.
absl::Status VerifyChunk(const ChunkLayout& layout, uint64_t model_fingerprint,
                         absl::Span<const std::byte> block, int* tokens);

inline std::byte* ChunkPayload(absl::Span<std::byte> block) {
  return block.data() + kChunkHeaderBytes;
}
inline const std::byte* ChunkPayload(absl::Span<const std::byte> block) {
  return block.data() + kChunkHeaderBytes;
}

}  // namespace strata::storage

#endif  // STRATA_STORAGE_CHUNK_FORMAT_H_
