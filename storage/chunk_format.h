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
// carries a magic number, a format version, flags, the model fingerprint and XXH3-64
// checksums of the payload and of the header itself. A chunk that fails any check is a
// miss and is never served.
//
// Sealing. A chunk is written in two steps: WriteChunkHeader() (cheap: no pass over the
// payload) marks it kChunkUnsealed, with no payload checksum yet; SealChunkHeader() later
// records the payload checksum and clears the flag. Only sealed chunks go to disk, so
// every chunk on disk is exactly a version-1 chunk with flags 0 (the field was reserved
// and zero before the flag existed): the format is unchanged.
//
// Verification. VerifyChunkHeader() checks everything but the payload (no pass over it):
// enough for a chunk that never left host memory. VerifyChunk() also requires a sealed
// chunk and checks its payload checksum: for bytes that come from, or go to, the disk.
#ifndef STRATA_STORAGE_CHUNK_FORMAT_H_
#define STRATA_STORAGE_CHUNK_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace strata::storage {

inline constexpr uint32_t kChunkMagic = 0x56'4b'54'53;  // "STKV" little-endian
inline constexpr uint16_t kChunkFormatVersion = 1;
// ChunkHeader::flags: the payload checksum has not been computed yet (host memory only;
// never on disk).
inline constexpr uint16_t kChunkUnsealed = 1;
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
  uint16_t flags;         // kChunkUnsealed or 0; other bits are refused
  uint64_t model_fingerprint;
  uint32_t tokens;        // tokens held, 1..chunk_tokens
  uint32_t layers;
  uint32_t chunk_tokens;
  uint32_t reserved1;
  uint64_t row_bytes;
  uint64_t payload_checksum;  // XXH3-64 of the whole payload; 0 while unsealed
  uint64_t header_checksum;   // XXH3-64 of the bytes above this field
};
static_assert(sizeof(ChunkHeader) == 56);

// What a verified header says.
struct ChunkHeaderFacts {
  int tokens = 0;                 // tokens the chunk holds, 1..chunk_tokens
  bool sealed = false;            // the payload checksum is recorded
  uint64_t payload_checksum = 0;  // meaningful only when sealed
};

// Writes an unsealed header (kChunkUnsealed, no payload checksum) over the header region
// of `block`. No pass over the payload. `block` must hold layout.BlockBytes() bytes.
void WriteChunkHeader(const ChunkLayout& layout, uint64_t model_fingerprint, int tokens,
                      absl::Span<std::byte> block);
// XXH3-64 of the block's payload: one pass over layout.PayloadBytes() bytes.
uint64_t ChunkPayloadChecksum(const ChunkLayout& layout, absl::Span<const std::byte> block);
// Records `payload_checksum` in the block's header and clears kChunkUnsealed (the header
// checksum is recomputed). The header must be one WriteChunkHeader() wrote (or a sealed
// one: sealing again with the same checksum changes nothing).
void SealChunkHeader(absl::Span<std::byte> block, uint64_t payload_checksum);
// WriteChunkHeader, then SealChunkHeader with the payload's checksum: the header of a
// block whose payload (block + kChunkHeaderBytes) is already filled.
void SealChunk(const ChunkLayout& layout, uint64_t model_fingerprint, int tokens,
               absl::Span<std::byte> block);

// Checks a block's header only (no pass over the payload): magic, header checksum,
// version, flags, fingerprint, layout and token count. Returns OK when they match;
// FailedPrecondition when the chunk was written for another model (fingerprint), layout
// or format version, or carries flags this version does not know; DataLoss when bytes are
// corrupt. Sealed and unsealed chunks both pass. On success `*facts` (if non-null) says
// what the header holds.
absl::Status VerifyChunkHeader(const ChunkLayout& layout, uint64_t model_fingerprint,
                               absl::Span<const std::byte> block, ChunkHeaderFacts* facts);

// Checks a block whose bytes come from or go to the disk: VerifyChunkHeader(), then the
// chunk must be sealed (DataLoss if not) and its payload must match the header's payload
// checksum (DataLoss if not). On success `*tokens` (if non-null) is the number of tokens
// the chunk holds.
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
