// On-disk and in-memory format of one KV chunk: the unit of placement of a session's KV.
//
// A chunk holds the KV of up to `chunk_tokens` consecutive tokens of one session, for
// every layer, position-free (K is stored before RoPE). It is one block:
//
//   [ header page: ChunkHeader, then the ChunkDescriptor (version 2), zero-padded to kChunkHeaderBytes ][ payload ]
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
// Format versions. Version 1 (written until the descriptor existed) is the 56-byte
// ChunkHeader alone, with reserved field zero; its header checksum covers the header's
// first 48 bytes. Version 2 gives that field a meaning, `descriptor_bytes`: the length of
// a ChunkDescriptor written right after the header (0: none), which says whose chunk this
// is — tenant, session id, base, the version's write generation and token count, the
// chunk's place among the version's chunks and the token IDs it holds — so that the
// session index can be rebuilt from the data file alone (index_rebuild.h). The header
// checksum of a version-2 chunk also covers the descriptor (XXH3-64 of the descriptor
// seeded with XXH3-64 of the header's first 48 bytes; with no descriptor it is the
// version-1 checksum). Both versions verify; only version 2 is written. The descriptor
// lives in the header page, which every block already reserves so that the payload stays
// page-aligned: it adds no byte to a block or to a write.
//
// Descriptor encoding (little-endian, right after the ChunkHeader):
//   generation u64, last_access_unix_ms i64, session_tokens u32, chunk_index u32,
//   chunk_count u32, tenant_bytes u16, session_id_bytes u16, base_bytes u32,
//   tenant, session_id, base (raw bytes), then `tokens` (the header's count) token IDs i32.
// It is carried only when it fits the page (kChunkDescriptorMaxBytes): with 4-byte token
// IDs, chunks of up to about 1,000 tokens with short names.
//
// Sealing. A chunk is written in two steps: WriteChunkHeader() (cheap: no pass over the
// payload) marks it kChunkUnsealed, with no payload checksum and no descriptor yet;
// SealChunkHeader() later records the payload checksum (and, from the write-back, the
// descriptor of the version being written) and clears the flag. Only sealed chunks go to
// disk.
//
// Verification. VerifyChunkHeader() checks everything but the payload (no pass over it):
// enough for a chunk that never left host memory. VerifyChunk() also requires a sealed
// chunk and checks its payload checksum: for bytes that come from, or go to, the disk.
// ReadChunkHeaderPage() checks a header page read on its own and decodes its descriptor.
#ifndef STRATA_STORAGE_CHUNK_FORMAT_H_
#define STRATA_STORAGE_CHUNK_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata::storage {

inline constexpr uint32_t kChunkMagic = 0x56'4b'54'53;  // "STKV" little-endian
inline constexpr uint16_t kChunkFormatVersion = 2;      // what is written
inline constexpr uint16_t kChunkFormatOldestVersion = 1;  // the oldest that still verifies
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
  uint32_t descriptor_bytes;  // version 2: bytes of the ChunkDescriptor after this header; version 1: 0
  uint64_t row_bytes;
  uint64_t payload_checksum;  // XXH3-64 of the whole payload; 0 while unsealed
  uint64_t header_checksum;   // XXH3-64 of the bytes above this field
};
static_assert(sizeof(ChunkHeader) == 56);

// Whose chunk it is (format version 2; encoding above). Written by the write-back for the
// version it persists; read back only to rebuild a lost index.
struct ChunkDescriptor {
  std::string tenant;
  std::string session_id;
  std::string base;         // SessionStore::Save's base, "" for none
  uint64_t generation = 0;  // the write-back that wrote the version; grows across restarts
  int64_t last_access_unix_ms = 0;
  uint32_t session_tokens = 0;  // tokens of the whole version
  uint32_t chunk_index = 0;     // this chunk's place in the version, from 0
  uint32_t chunk_count = 0;     // chunks of the version
  std::vector<int32_t> tokens;  // the token IDs this chunk holds, as many as the header says
  bool operator==(const ChunkDescriptor&) const = default;
};

// Room for a descriptor in the header page.
inline constexpr int64_t kChunkDescriptorMaxBytes = kChunkHeaderBytes - static_cast<int64_t>(sizeof(ChunkHeader));
// Bytes `descriptor` takes encoded; it is carried only when this is at most kChunkDescriptorMaxBytes.
int64_t ChunkDescriptorBytes(const ChunkDescriptor& descriptor);
// The most tokens a chunk can hold and still carry a descriptor whose names (tenant,
// session id and base together) take `name_bytes`; 0 when none fits.
int64_t MaxDescribedChunkTokens(int64_t name_bytes);

// What a verified header says.
struct ChunkHeaderFacts {
  int tokens = 0;                 // tokens the chunk holds, 1..chunk_tokens
  bool sealed = false;            // the payload checksum is recorded
  uint64_t payload_checksum = 0;  // meaningful only when sealed
};

// Writes an unsealed header (kChunkUnsealed, no payload checksum, no descriptor) over the
// header page of `block`. No pass over the payload. `block` must hold layout.BlockBytes() bytes.
void WriteChunkHeader(const ChunkLayout& layout, uint64_t model_fingerprint, int tokens,
                      absl::Span<std::byte> block);
// Zeroes the rows of each of the payload's planes (a layer's K or V) from row `tokens` on: a
// partial chunk's unused rows, which its save leaves as the block's earlier owner wrote
// them. Done before the payload is hashed and written to disk, off the thread that saved it.
void ZeroRowsPast(const ChunkLayout& layout, int tokens, absl::Span<std::byte> block);
// XXH3-64 of the block's payload: one pass over layout.PayloadBytes() bytes.
uint64_t ChunkPayloadChecksum(const ChunkLayout& layout, absl::Span<const std::byte> block);
// Records `payload_checksum` in the block's header and clears kChunkUnsealed (the header
// checksum is recomputed), keeping the descriptor it carries, if any. The header must be
// one WriteChunkHeader() wrote (or a sealed one: sealing again with the same checksum
// changes nothing).
void SealChunkHeader(absl::Span<std::byte> block, uint64_t payload_checksum);
// SealChunkHeader, and the header page then carries `descriptor` in place of any it held,
// or none when it does not fit (ChunkDescriptorBytes > kChunkDescriptorMaxBytes). Returns
// whether it carries `descriptor`. descriptor.tokens must hold the header's token count.
bool SealChunkHeader(absl::Span<std::byte> block, uint64_t payload_checksum, const ChunkDescriptor& descriptor);
// WriteChunkHeader, then SealChunkHeader with the payload's checksum: the header of a
// block whose payload (block + kChunkHeaderBytes) is already filled.
void SealChunk(const ChunkLayout& layout, uint64_t model_fingerprint, int tokens,
               absl::Span<std::byte> block);

// Checks a block's header only (no pass over the payload): magic, header checksum
// (descriptor included), version (1 or 2), flags, fingerprint, layout and token count. Returns OK when they match;
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

// What a header page read on its own says (index_rebuild.h).
struct DescribedChunk {
  ChunkHeaderFacts facts;
  std::optional<ChunkDescriptor> descriptor;  // none: version 1, or one that did not fit
};
// Checks a header page (kChunkHeaderBytes, read without its payload) as VerifyChunkHeader
// does, requires it sealed, and decodes its descriptor. Returns NotFound when the page
// holds no chunk header at all (no magic number: a block never written or erased),
// VerifyChunkHeader's FailedPrecondition (another model, layout or format version) and
// DataLoss (damaged bytes, an unsealed chunk, a descriptor that does not decode or does
// not agree with the header).
absl::StatusOr<DescribedChunk> ReadChunkHeaderPage(const ChunkLayout& layout, uint64_t model_fingerprint,
                                                   absl::Span<const std::byte> page);

inline std::byte* ChunkPayload(absl::Span<std::byte> block) {
  return block.data() + kChunkHeaderBytes;
}
inline const std::byte* ChunkPayload(absl::Span<const std::byte> block) {
  return block.data() + kChunkHeaderBytes;
}

}  // namespace strata::storage

#endif  // STRATA_STORAGE_CHUNK_FORMAT_H_
