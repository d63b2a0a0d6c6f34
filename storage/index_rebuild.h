// Rebuilding the session index from the SSD data file alone, for when the index is lost:
// found damaged at start, missing or empty while the data file holds data, or behind its
// record of acknowledged writes (SessionStore decides when: session_recovery.cc).
//
// What the data file says on its own. Every chunk the write-back puts on SSD carries in
// its header page a descriptor (chunk_format.h): the tenant, session id and base of its
// session, the version's write generation, token count and last access, the chunk's place
// among the version's chunks and the token IDs it holds. Together with the chunk's own
// payload checksum and where it lies, that is everything an index record holds.
//
// The rule. Per session, the version rebuilt is the one with the highest generation among
// those that are
//   complete  every chunk 0..count-1 present exactly once, all agreeing on the version's
//             tokens, base, chunk count and last access, and
//   verified  every chunk's header checksum and payload checksum hold (each payload is
//             read in full),
// and whose last access is within the TTL. An incomplete version (half written when the
// process stopped, or cut across by a later reuse of its blocks) is never used and never
// mixed with another; a complete one with a chunk that fails its checksum is passed over
// for the next older complete one, if any. A session with neither is not rebuilt.
//
// What "committed" means when the index is gone. A version's chunks are all written and
// synced before its index record is put, so a complete, verified version has reached its
// durability point: it was acknowledged, or the process stopped between the data sync and
// the index write (the one window in which a complete version goes unacknowledged; its KV
// is exactly its tokens' KV, so it is never served wrong, only newer than the last
// acknowledgement). Whatever else reached the disk and was given up — a version once
// replaced by a newer one, the versions of a session that left the store (DropSession,
// TTL, corruption, the SSD's room), a write abandoned by a drop or a failed index write —
// has its chunk headers erased (EraseChunkHeaders) before its blocks return to the free
// list, so it cannot come back. Erasures for a session leaving the store are synced before
// its blocks are reused; those of a replaced version ride on the next write-back's sync,
// so a power cut may leave the older version on disk: the rebuild passes it over for the
// newer (a higher generation), and falls back to it only if the newer fails its checksum.
//
// Chunks that cannot speak for themselves. Chunks written before the descriptor (format
// 1) or whose descriptor did not fit carry no identity: a record the index as found still
// holds for such chunks (a repaired or partly replayed index) is kept as it is, its chunks
// checked at their first promotion as at any start (KeepIndexedUndescribed); such chunks
// no record names are lost, as before the descriptor existed.
//
// Cost. The scan reads one 4 KiB header page per block the data file held at open, then
// the whole of each chosen version (what a first promotion would read anyway).
#ifndef STRATA_STORAGE_INDEX_REBUILD_H_
#define STRATA_STORAGE_INDEX_REBUILD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "storage/chunk_format.h"
#include "storage/session_index.h"
#include "storage/ssd_tier.h"

namespace strata::storage {

struct IndexRebuildOptions {
  ChunkLayout layout;
  uint64_t model_fingerprint = 0;
  absl::Duration ttl = absl::InfiniteDuration();  // sessions last used before now - ttl are not rebuilt
  absl::Time now = absl::Now();
};

// What a scan of the data file found and chose.
struct IndexRebuild {
  // One per session rebuilt (its chosen version), then those KeepIndexedUndescribed kept.
  std::vector<SessionRecord> records;
  // Blocks holding a chunk header that no record uses (older, incomplete, failing or
  // expired versions, another model's or format's chunks, damaged headers): to be erased
  // before they are reused.
  std::vector<SsdLocation> erase;
  // Blocks holding a verified header of this model and layout but no descriptor (format 1,
  // or one that did not fit): in `erase` too, unless KeepIndexedUndescribed keeps them.
  std::vector<SsdLocation> undescribed;
  uint64_t max_generation = 0;  // the highest generation any descriptor carries
  int64_t kept_records = 0;     // records of the index as found kept by KeepIndexedUndescribed
  int64_t kept_chunks = 0;      // and the chunks they name

  int64_t blocks_scanned = 0;
  int64_t chunks_found = 0;  // blocks holding a chunk header of any kind
  int64_t chunks_rebuilt = 0;
  int64_t bytes_rebuilt = 0;         // blocks of the records, in bytes
  int64_t sessions_not_rebuilt = 0;  // no complete, verified version
  int64_t sessions_expired = 0;      // past the TTL
  int64_t superseded_versions = 0;   // older than the version chosen
  int64_t incomplete_versions = 0;   // chunks missing or disagreeing
  int64_t corrupt_versions = 0;      // complete, but a chunk failed its checksum
  int64_t damaged_chunks = 0;        // a header that does not verify or decode
  int64_t foreign_chunks = 0;        // another model, layout or format version
  int64_t undescribed_chunks = 0;    // format 1, or a descriptor that did not fit

  // One sentence: what was rebuilt, and what was not and why.
  std::string Summary() const;
};

// Scans every block the data files held at open (SsdTier::LocationsFoundAtOpen) and
// chooses, per session, the version to rebuild (the rule above). Reads only; blocking (the
// reads go through the tier's ring). `scratch`: at least one buffer of ssd.block_bytes()
// bytes, 4096-aligned, into which payloads are read for verification (as many reads in
// flight as buffers). Returns the tier's error when a read fails; a chunk that cannot be
// read correctly is not an error, it is counted.
absl::StatusOr<IndexRebuild> PlanIndexRebuild(SsdTier& ssd, const IndexRebuildOptions& options,
                                              absl::Span<const absl::Span<std::byte>> scratch);

// Adds to `plan` the records of the index as found (`surviving`) that name only chunks
// without a descriptor (plan->undescribed) of a session the plan did not rebuild, and takes
// their blocks out of plan->erase.
void KeepIndexedUndescribed(const std::vector<SessionRecord>& surviving, IndexRebuild* plan);

// Overwrites the header page of each block with zeros, so that no rebuild takes what it
// held for a chunk, and waits for the writes (not synced: the caller syncs when the
// erasure must survive a power cut). Returns the first write error. Blocking.
absl::Status EraseChunkHeaders(SsdTier& ssd, absl::Span<const SsdLocation> blocks);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_INDEX_REBUILD_H_
