#include "storage/chunk_format.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace strata::storage {
namespace {

constexpr int64_t kPageBytes = 4096;
// The descriptor's fixed part: generation, last access, session tokens, chunk index and
// count, and the three name lengths.
constexpr int64_t kDescriptorFixedBytes = 8 + 8 + 4 + 4 + 4 + 2 + 2 + 4;

// Version 1: the header's first 48 bytes. Version 2 also covers the descriptor that
// follows the header in the page (none: the same as version 1).
uint64_t HeaderChecksum(const ChunkHeader& h, const std::byte* page) {
  const uint64_t fixed = XXH3_64bits(&h, offsetof(ChunkHeader, header_checksum));
  if (h.version < 2 || h.descriptor_bytes == 0) return fixed;
  return XXH3_64bits_withSeed(page + sizeof(ChunkHeader), h.descriptor_bytes, fixed);
}

// Writes `h` (its checksum computed over it and the descriptor already in `page`).
void PutHeader(ChunkHeader h, std::byte* page) {
  h.header_checksum = HeaderChecksum(h, page);
  std::memcpy(page, &h, sizeof(h));
}

template <typename T>
void Append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::string EncodeDescriptor(const ChunkDescriptor& d) {
  std::string out;
  out.reserve(static_cast<size_t>(ChunkDescriptorBytes(d)));
  Append(out, d.generation);
  Append(out, d.last_access_unix_ms);
  Append(out, d.session_tokens);
  Append(out, d.chunk_index);
  Append(out, d.chunk_count);
  Append(out, static_cast<uint16_t>(d.tenant.size()));
  Append(out, static_cast<uint16_t>(d.session_id.size()));
  Append(out, static_cast<uint32_t>(d.base.size()));
  out += d.tenant;
  out += d.session_id;
  out += d.base;
  out.append(reinterpret_cast<const char*>(d.tokens.data()), d.tokens.size() * sizeof(int32_t));
  return out;
}

// Decodes a descriptor of `bytes` holding `tokens` token IDs; DataLoss if it is not one.
absl::StatusOr<ChunkDescriptor> DecodeDescriptor(const std::byte* bytes, int64_t size, int tokens) {
  ChunkDescriptor d;
  if (size < kDescriptorFixedBytes) return absl::DataLossError("chunk descriptor is truncated");
  uint16_t tenant_bytes = 0, session_bytes = 0;
  uint32_t base_bytes = 0;
  const std::byte* p = bytes;
  auto get = [&p](auto* v) {
    std::memcpy(v, p, sizeof(*v));
    p += sizeof(*v);
  };
  get(&d.generation);
  get(&d.last_access_unix_ms);
  get(&d.session_tokens);
  get(&d.chunk_index);
  get(&d.chunk_count);
  get(&tenant_bytes);
  get(&session_bytes);
  get(&base_bytes);
  const int64_t names = int64_t{tenant_bytes} + session_bytes + base_bytes;
  if (size != kDescriptorFixedBytes + names + int64_t{tokens} * 4) {
    return absl::DataLossError("chunk descriptor length does not match its contents");
  }
  auto text = [&p](std::string* s, size_t n) {
    s->assign(reinterpret_cast<const char*>(p), n);
    p += n;
  };
  text(&d.tenant, tenant_bytes);
  text(&d.session_id, session_bytes);
  text(&d.base, base_bytes);
  d.tokens.resize(static_cast<size_t>(tokens));
  std::memcpy(d.tokens.data(), p, d.tokens.size() * sizeof(int32_t));
  return d;
}

// The header of `page` if it is a whole one of a known version (magic, checksum, version,
// flags); NotFound when there is no magic number, DataLoss or FailedPrecondition otherwise.
absl::StatusOr<ChunkHeader> ReadHeader(absl::Span<const std::byte> page) {
  ChunkHeader h;
  std::memcpy(&h, page.data(), sizeof(h));
  if (h.magic != kChunkMagic) return absl::NotFoundError("chunk magic number mismatch");
  if (h.version >= 2 && h.descriptor_bytes > kChunkDescriptorMaxBytes) {
    return absl::DataLossError(absl::StrCat("chunk claims a descriptor of ", h.descriptor_bytes, " bytes"));
  }
  if (h.header_checksum != HeaderChecksum(h, page.data())) {
    return absl::DataLossError("chunk header checksum mismatch");
  }
  if (h.version < kChunkFormatOldestVersion || h.version > kChunkFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("chunk format version ", h.version, " is not one of ",
                                                      kChunkFormatOldestVersion, "..", kChunkFormatVersion));
  }
  if ((h.flags & ~kChunkUnsealed) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("chunk carries unknown flags ", h.flags));
  }
  return h;
}

// The checks of a header against the store's model and layout.
absl::Status CheckHeader(const ChunkLayout& layout, uint64_t model_fingerprint, const ChunkHeader& h) {
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
  return absl::OkStatus();
}

}  // namespace

int64_t ChunkDescriptorBytes(const ChunkDescriptor& d) {
  return kDescriptorFixedBytes + static_cast<int64_t>(d.tenant.size() + d.session_id.size() + d.base.size()) +
         static_cast<int64_t>(d.tokens.size()) * 4;
}

int64_t MaxDescribedChunkTokens(int64_t name_bytes) {
  return std::max<int64_t>(0, (kChunkDescriptorMaxBytes - kDescriptorFixedBytes - name_bytes) / 4);
}

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
  h.descriptor_bytes = 0;
  h.payload_checksum = 0;
  std::memset(block.data(), 0, kChunkHeaderBytes);
  PutHeader(h, block.data());
}

void ZeroRowsPast(const ChunkLayout& layout, int tokens, absl::Span<std::byte> block) {
  if (tokens >= layout.chunk_tokens) return;
  std::byte* payload = ChunkPayload(block);
  const size_t tail = static_cast<size_t>((layout.chunk_tokens - tokens) * layout.row_bytes);
  for (int l = 0; l < layout.layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) std::memset(payload + layout.RowOffset(l, kv, tokens), 0, tail);
  }
}

uint64_t ChunkPayloadChecksum(const ChunkLayout& layout, absl::Span<const std::byte> block) {
  return XXH3_64bits(ChunkPayload(block), static_cast<size_t>(layout.PayloadBytes()));
}

void SealChunkHeader(absl::Span<std::byte> block, uint64_t payload_checksum) {
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  h.flags = static_cast<uint16_t>(h.flags & ~kChunkUnsealed);
  h.payload_checksum = payload_checksum;
  PutHeader(h, block.data());
}

bool SealChunkHeader(absl::Span<std::byte> block, uint64_t payload_checksum, const ChunkDescriptor& descriptor) {
  ChunkHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  h.version = kChunkFormatVersion;
  h.flags = static_cast<uint16_t>(h.flags & ~kChunkUnsealed);
  h.payload_checksum = payload_checksum;
  const bool fits = ChunkDescriptorBytes(descriptor) <= kChunkDescriptorMaxBytes;
  // The rest of the page is zero, as WriteChunkHeader leaves it: a page's bytes depend
  // only on what it says.
  std::byte* after = block.data() + sizeof(ChunkHeader);
  std::memset(after, 0, static_cast<size_t>(kChunkDescriptorMaxBytes));
  h.descriptor_bytes = 0;
  if (fits) {
    const std::string encoded = EncodeDescriptor(descriptor);
    std::memcpy(after, encoded.data(), encoded.size());
    h.descriptor_bytes = static_cast<uint32_t>(encoded.size());
  }
  PutHeader(h, block.data());
  return fits;
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
  absl::StatusOr<ChunkHeader> read = ReadHeader(block);
  if (!read.ok()) {
    // A missing magic number is damage here: the caller expected a chunk.
    return absl::IsNotFound(read.status()) ? absl::DataLossError(read.status().message()) : read.status();
  }
  const ChunkHeader& h = *read;
  if (absl::Status s = CheckHeader(layout, model_fingerprint, h); !s.ok()) return s;
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

absl::StatusOr<DescribedChunk> ReadChunkHeaderPage(const ChunkLayout& layout, uint64_t model_fingerprint,
                                                   absl::Span<const std::byte> page) {
  if (static_cast<int64_t>(page.size()) < kChunkHeaderBytes) return absl::DataLossError("chunk header page is short");
  absl::StatusOr<ChunkHeader> read = ReadHeader(page);
  if (!read.ok()) return read.status();
  const ChunkHeader& h = *read;
  if (absl::Status s = CheckHeader(layout, model_fingerprint, h); !s.ok()) return s;
  if ((h.flags & kChunkUnsealed) != 0) return absl::DataLossError("chunk on disk was never sealed");
  DescribedChunk out;
  out.facts.tokens = static_cast<int>(h.tokens);
  out.facts.sealed = true;
  out.facts.payload_checksum = h.payload_checksum;
  if (h.version < 2 || h.descriptor_bytes == 0) return out;
  absl::StatusOr<ChunkDescriptor> d =
      DecodeDescriptor(page.data() + sizeof(ChunkHeader), h.descriptor_bytes, static_cast<int>(h.tokens));
  if (!d.ok()) return d.status();
  const int64_t ct = layout.chunk_tokens;
  const int64_t count = (int64_t{d->session_tokens} + ct - 1) / ct;
  const int64_t expected = std::min<int64_t>(ct, int64_t{d->session_tokens} - int64_t{d->chunk_index} * ct);
  if (d->chunk_count == 0 || d->chunk_count != count || d->chunk_index >= d->chunk_count ||
      expected != int64_t{h.tokens}) {
    return absl::DataLossError(absl::StrCat("chunk descriptor (chunk ", d->chunk_index, " of ", d->chunk_count,
                                            ", a version of ", d->session_tokens,
                                            " tokens) does not agree with the header's ", h.tokens, " tokens"));
  }
  out.descriptor = *std::move(d);
  return out;
}

}  // namespace strata::storage
