#include "storage/index_rebuild.h"

#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/io_batch.h"

namespace strata::storage {
namespace {

// Header pages read at once by the scan (one buffer of this many pages).
constexpr int kPagesPerBatch = 64;

// A zero page, the source of every erasure (O_DIRECT wants it aligned).
alignas(4096) constexpr std::byte kZeroPage[kChunkHeaderBytes] = {};

struct AlignedFree {
  void operator()(std::byte* p) const { free(p); }
};

// A chunk whose header page verified and carries a descriptor.
struct FoundChunk {
  SsdLocation loc;
  uint64_t payload_checksum = 0;
  ChunkDescriptor descriptor;
};

// The chunks found of one version of a session.
using Version = std::vector<const FoundChunk*>;

// Whether `v` holds each of its chunks exactly once, all agreeing on what the version is.
bool Complete(const Version& v) {
  const ChunkDescriptor& first = v.front()->descriptor;
  if (v.size() != first.chunk_count) return false;
  std::vector<bool> seen(first.chunk_count, false);
  for (const FoundChunk* c : v) {
    const ChunkDescriptor& d = c->descriptor;
    if (d.chunk_count != first.chunk_count || d.session_tokens != first.session_tokens || d.base != first.base ||
        d.last_access_unix_ms != first.last_access_unix_ms || seen[d.chunk_index]) {
      return false;
    }
    seen[d.chunk_index] = true;
  }
  return true;
}

// The version's chunks in order (it is Complete).
Version InOrder(const Version& v) {
  Version ordered(v.size());
  for (const FoundChunk* c : v) ordered[c->descriptor.chunk_index] = c;
  return ordered;
}

// Reads every chunk of `v` in full and checks it: header and payload checksums, and the
// payload checksum the scan saw. OK, a read error (the tier's), or DataLoss.
absl::Status VerifyVersion(SsdTier& ssd, const IndexRebuildOptions& o, const Version& v,
                           absl::Span<const absl::Span<std::byte>> scratch) {
  for (size_t first = 0; first < v.size(); first += scratch.size()) {
    const size_t n = std::min(scratch.size(), v.size() - first);
    IoBatch reads;
    for (size_t i = 0; i < n; ++i) ssd.Read(v[first + i]->loc, scratch[i].data(), reads.Callback());
    if (absl::Status s = reads.Wait(); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) {
      ChunkHeaderFacts facts;
      absl::Status s = VerifyChunkHeader(o.layout, o.model_fingerprint, scratch[i], &facts);
      if (s.ok() && facts.payload_checksum != v[first + i]->payload_checksum) {
        s = absl::DataLossError("chunk header changed between the scan and its verification");
      }
      if (s.ok()) s = VerifyChunk(o.layout, o.model_fingerprint, scratch[i], nullptr);
      if (!s.ok()) return absl::DataLossError(s.message());
    }
  }
  return absl::OkStatus();
}

SessionRecord RecordOf(const IndexRebuildOptions& o, const Version& ordered) {
  const ChunkDescriptor& d = ordered.front()->descriptor;
  SessionRecord r;
  r.tenant = d.tenant;
  r.session_id = d.session_id;
  r.base = d.base;
  r.model_fingerprint = o.model_fingerprint;
  r.generation = d.generation;
  r.last_access_unix_ms = d.last_access_unix_ms;
  for (const FoundChunk* c : ordered) {
    r.tokens.insert(r.tokens.end(), c->descriptor.tokens.begin(), c->descriptor.tokens.end());
    r.chunks.push_back(IndexedChunk{c->loc.file, c->loc.offset, static_cast<uint32_t>(c->descriptor.tokens.size()),
                                    c->payload_checksum});
  }
  return r;
}

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrCat(bytes >> 30, " GiB");
  if (bytes >= (int64_t{1} << 20)) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= (int64_t{1} << 10)) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " bytes");
}

// "1 session", "2 sessions".
std::string Count(int64_t n, const char* what) { return absl::StrCat(n, " ", what, n == 1 ? "" : "s"); }

}  // namespace

std::string IndexRebuild::Summary() const {
  std::string out = absl::StrCat("the index is rebuilt from the chunk headers of ", Count(blocks_scanned, "SSD block"),
                                 ": ", Count(static_cast<int64_t>(records.size()) - kept_records, "session"), " (",
                                 Count(chunks_rebuilt, "chunk"), ", ", Bytes(bytes_rebuilt), ")");
  if (sessions_not_rebuilt + sessions_expired > 0) {
    absl::StrAppend(&out, "; not rebuilt: ", Count(sessions_not_rebuilt, "session"),
                    " with no complete, verified version, ", sessions_expired, " past their TTL");
  }
  if (superseded_versions + incomplete_versions + corrupt_versions > 0) {
    absl::StrAppend(&out, "; passed over: ", Count(superseded_versions, "older version"), ", ", incomplete_versions,
                    " incomplete (half written or overwritten), ", corrupt_versions, " failing a checksum");
  }
  if (kept_records > 0) {
    absl::StrAppend(&out, "; kept ", Count(kept_records, "record"),
                    " of the index as found whose chunks carry no descriptor (format 1)");
  }
  const int64_t unnamed = undescribed_chunks - kept_chunks;
  if (damaged_chunks + foreign_chunks + unnamed > 0) {
    absl::StrAppend(&out, "; unusable: ", Count(foreign_chunks, "chunk"), " of another model, layout or format, ",
                    unnamed, " without a descriptor, ", damaged_chunks, " with a damaged header");
  }
  if (!erase.empty())
    absl::StrAppend(&out, " (", Count(static_cast<int64_t>(erase.size()), "unused chunk header"), " erased)");
  return out;
}

absl::StatusOr<IndexRebuild> PlanIndexRebuild(SsdTier& ssd, const IndexRebuildOptions& o,
                                              absl::Span<const absl::Span<std::byte>> scratch) {
  if (scratch.empty()) return absl::InvalidArgumentError("the index rebuild needs a block to read into");
  IndexRebuild plan;
  // 1. Every header page, kPagesPerBatch at a time.
  const std::vector<SsdLocation> blocks = ssd.LocationsFoundAtOpen();
  plan.blocks_scanned = static_cast<int64_t>(blocks.size());
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, static_cast<size_t>(kPagesPerBatch * kChunkHeaderBytes)) != 0) {
    return absl::ResourceExhaustedError("no memory for the index rebuild's pages");
  }
  std::unique_ptr<std::byte, AlignedFree> pages(static_cast<std::byte*>(raw));
  std::vector<FoundChunk> found;
  for (size_t first = 0; first < blocks.size(); first += kPagesPerBatch) {
    const size_t n = std::min<size_t>(kPagesPerBatch, blocks.size() - first);
    IoBatch reads;
    for (size_t i = 0; i < n; ++i) {
      ssd.Read(blocks[first + i], pages.get() + i * kChunkHeaderBytes, kChunkHeaderBytes, reads.Callback());
    }
    if (absl::Status s = reads.Wait(); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) {
      absl::Span<const std::byte> page(pages.get() + i * kChunkHeaderBytes, kChunkHeaderBytes);
      absl::StatusOr<DescribedChunk> read = ReadChunkHeaderPage(o.layout, o.model_fingerprint, page);
      if (absl::IsNotFound(read.status())) continue;  // never written, or erased
      ++plan.chunks_found;
      if (!read.ok() || !read->descriptor.has_value()) {
        if (read.ok()) {
          ++plan.undescribed_chunks;
          plan.undescribed.push_back(blocks[first + i]);
        } else if (absl::IsFailedPrecondition(read.status())) {
          ++plan.foreign_chunks;
        } else {
          ++plan.damaged_chunks;
        }
        plan.erase.push_back(blocks[first + i]);
        continue;
      }
      plan.max_generation = std::max(plan.max_generation, read->descriptor->generation);
      found.push_back(FoundChunk{blocks[first + i], read->facts.payload_checksum, *std::move(read->descriptor)});
    }
  }
  // 2. By session, then by version, newest first.
  std::map<std::pair<std::string, std::string>, std::map<uint64_t, Version, std::greater<>>> sessions;
  for (const FoundChunk& c : found) {
    sessions[{c.descriptor.tenant, c.descriptor.session_id}][c.descriptor.generation].push_back(&c);
  }
  // 3. Per session, the newest complete version that verifies.
  for (const auto& [key, versions] : sessions) {
    const Version* chosen = nullptr;
    bool expired = false;
    for (const auto& [generation, version] : versions) {
      if (chosen != nullptr) {
        ++plan.superseded_versions;
      } else if (expired) {
        // older than an expired version: expired too
      } else if (!Complete(version)) {
        ++plan.incomplete_versions;
      } else if (absl::FromUnixMillis(version.front()->descriptor.last_access_unix_ms) + o.ttl < o.now) {
        expired = true;  // and so is every older version
      } else if (absl::Status s = VerifyVersion(ssd, o, InOrder(version), scratch); absl::IsDataLoss(s)) {
        ++plan.corrupt_versions;
      } else if (!s.ok()) {
        return s;
      } else {
        chosen = &version;
        continue;
      }
      for (const FoundChunk* c : version) plan.erase.push_back(c->loc);
    }
    if (chosen == nullptr) {
      if (expired) {
        ++plan.sessions_expired;
      } else {
        ++plan.sessions_not_rebuilt;
      }
      continue;
    }
    plan.records.push_back(RecordOf(o, InOrder(*chosen)));
    plan.chunks_rebuilt += static_cast<int64_t>(chosen->size());
  }
  plan.bytes_rebuilt = plan.chunks_rebuilt * ssd.block_bytes();
  return plan;
}

void KeepIndexedUndescribed(const std::vector<SessionRecord>& surviving, IndexRebuild* plan) {
  auto key = [](const SsdLocation& l) { return std::make_pair(l.file, l.offset); };
  std::set<std::pair<uint32_t, uint64_t>> undescribed, kept;
  for (const SsdLocation& l : plan->undescribed) undescribed.insert(key(l));
  std::set<std::pair<std::string, std::string>> rebuilt;
  for (const SessionRecord& r : plan->records) rebuilt.insert({r.tenant, r.session_id});
  for (const SessionRecord& r : surviving) {
    if (r.chunks.empty() || rebuilt.contains({r.tenant, r.session_id})) continue;
    bool all = true;
    for (const IndexedChunk& c : r.chunks) {
      all = all && undescribed.contains({c.file, c.offset}) && !kept.contains({c.file, c.offset});
    }
    if (!all) continue;
    for (const IndexedChunk& c : r.chunks) kept.insert({c.file, c.offset});
    plan->records.push_back(r);
    ++plan->kept_records;
    plan->kept_chunks += static_cast<int64_t>(r.chunks.size());
  }
  std::erase_if(plan->erase, [&](const SsdLocation& l) { return kept.contains(key(l)); });
}

absl::Status EraseChunkHeaders(SsdTier& ssd, absl::Span<const SsdLocation> blocks) {
  IoBatch writes;
  for (const SsdLocation& loc : blocks) ssd.Write(loc, kZeroPage, kChunkHeaderBytes, writes.Callback());
  return writes.Wait();
}

}  // namespace strata::storage
