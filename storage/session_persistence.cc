// SessionStoreImpl, the SSD half: write-back and index commits, retiring freed blocks,
// flush, TTL sweeps, degraded mode.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "storage/index_rebuild.h"
#include "storage/io_batch.h"
#include "storage/session_store_impl.h"

namespace strata::storage {
namespace {

constexpr absl::Duration kSweepInterval = absl::Seconds(10);

// What chunk `c` of the version `record` names says about itself on disk (index_rebuild.h).
ChunkDescriptor DescriptorOf(const SessionRecord& record, size_t c, int64_t chunk_tokens) {
  ChunkDescriptor d;
  d.tenant = record.tenant;
  d.session_id = record.session_id;
  d.base = record.base;
  d.generation = record.generation;
  d.last_access_unix_ms = record.last_access_unix_ms;
  d.session_tokens = static_cast<uint32_t>(record.tokens.size());
  d.chunk_index = static_cast<uint32_t>(c);
  d.chunk_count = static_cast<uint32_t>(record.chunks.size());
  const auto first = record.tokens.begin() + static_cast<int64_t>(c) * chunk_tokens;
  d.tokens.assign(first, first + record.chunks[c].tokens);
  return d;
}

}  // namespace

void SessionStoreImpl::PersistLoop() {
  for (;;) {
    PersistJob job;
    {
      MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !persist_queue_.empty();
      };
      mu_.AwaitWithTimeout(ready, kSweepInterval);
      if (persist_queue_.empty()) {
        if (stopping_) return;
        SweepExpiredLocked();
        if (degraded_ && absl::Now() >= next_recovery_try_) {
          next_recovery_try_ = absl::Now() + kSweepInterval;
          mu_.Unlock();
          TryLeaveDegraded();
          mu_.Lock();
        }
        continue;
      }
      job = std::move(persist_queue_.front());
      persist_queue_.pop_front();
      ++persist_busy_;
    }
    RunPersistJob(std::move(job));
    MutexLock lock(&mu_);
    --persist_busy_;
  }
}

void SessionStoreImpl::RunPersistJob(PersistJob job) {
  if (job.retire) {
    RetireSsdBlocks(job.free_after, job.sync);
    return;
  }
  if (!job.drop) {
    WriteBack(job.map_key, job.version);
    return;
  }
  absl::Status s = index_->Delete(job.tenant, job.session_id);
  if (absl::IsFailedPrecondition(s)) {
    // The index is read-only: the record goes (and the blocks come free) once it is writable.
    // Until then the drop is recorded beside the index (a restart before then does not
    // recover the record) and the chunks' headers are erased in place (nor does a rebuild
    // take them up; a full file system still takes writes into the data file's blocks).
    const uint64_t now_us = static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMicros(absl::Now())));
    absl::Status recorded = pending_drops_.Add({job.tenant, job.session_id}, now_us);
    absl::Status erased = EraseChunkHeaders(*ssd_, job.free_after);
    if (erased.ok()) erased = ssd_->Sync();
    if (!recorded.ok() || !erased.ok()) {
      LOG(ERROR) << "session '" << job.session_id << "' of tenant '" << job.tenant
                 << "' is dropped, but its index record cannot be deleted now (read-only), and recording the drop "
                 << "beside it / erasing its chunks' headers failed (" << recorded << " / " << erased
                 << "): a restart before the index is writable again may bring it back";
    }
    MutexLock lock(&mu_);
    deferred_drops_.push_back(std::move(job));
    return;
  }
  if (!s.ok() && !absl::IsNotFound(s)) {
    // The record may still name these blocks: keep them allocated rather than risk
    // another session's bytes under this record after a restart.
    LOG(ERROR) << "cannot delete index record of session '" << job.session_id << "': " << s;
    return;
  }
  // Synced: a session that left the store must not come back from a rebuild after a power cut.
  RetireSsdBlocks(job.free_after, /*sync=*/true);
}

void SessionStoreImpl::RetireLocked(std::vector<SsdLocation> blocks, bool sync) {
  if (blocks.empty()) return;
  PersistJob job;
  job.retire = true;
  job.sync = sync;
  job.free_after = std::move(blocks);
  // At the front: the blocks come free before the next write-back looks for room.
  persist_queue_.push_front(std::move(job));
}

void SessionStoreImpl::RetireSsdBlocks(const std::vector<SsdLocation>& blocks, bool sync) {
  if (blocks.empty()) return;
  absl::Status s = EraseChunkHeaders(*ssd_, blocks);
  if (s.ok() && sync) s = ssd_->Sync();
  if (!s.ok()) {
    // The index still says what is live; only a rebuild could take these up again.
    MutexLock lock(&mu_);
    if (retire_failures_++ % 1000 == 0) {
      LOG(WARNING) << "cannot erase the chunk headers of freed SSD blocks (" << retire_failures_
                   << " failures so far): should the index be lost, a rebuild may bring back what they held: " << s;
    }
  }
  for (const SsdLocation& loc : blocks) ssd_->Free(loc);
  // Sessions that found no room are written back now where it is there for them.
  MutexLock lock(&mu_);
  for (auto w = waiting_for_room_.begin(); w != waiting_for_room_.end();) {
    auto it = sessions_.find(*w);
    const bool waits = it != sessions_.end() && !it->second->host.empty() && !it->second->persisted &&
                       it->second->filling == 0;
    if (waits && static_cast<int64_t>(it->second->host.size()) > ssd_->free_blocks()) {
      ++w;
      continue;
    }
    if (waits) EnqueueWriteBackLocked(*w, *it->second);
    w = waiting_for_room_.erase(w);  // (a btree's erase moves the others: the next one is returned)
  }
}

uint64_t SessionStoreImpl::NextGenerationLocked() {
  // The clock keeps generations above those of earlier runs whose records are gone; the
  // floor (records and data file, at recovery) keeps them above a clock set back.
  const uint64_t now_us = static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMicros(absl::Now())));
  last_generation_ = std::max(last_generation_ + 1, now_us);
  return last_generation_;
}

void SessionStoreImpl::WriteBack(const std::string& map_key, uint64_t version) {
  const ChunkLayout& layout = options_.layout;
  SessionRecord record;
  std::vector<uint32_t> host_blocks;
  std::vector<absl::Span<std::byte>> blocks;
  std::vector<std::optional<uint64_t>> sealed;  // checksums known when the job started
  std::vector<SsdLocation> targets;
  uint64_t born = 0;
  std::vector<std::pair<SessionKey, std::vector<SsdLocation>>> evicted;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(map_key);
    if (degraded_ || it == sessions_.end() || it->second->version != version || it->second->host.empty() ||
        it->second->filling != 0) {
      return;  // dropped, demoted before it was written, or a newer version will follow
    }
    Session& s = *it->second;
    const int64_t n = static_cast<int64_t>(s.host.size());
    // Room within the tenant's SSD quota, from its own sessions (session_room.cc).
    int64_t quota_freeing = 0;
    if (!MakeSsdQuotaRoomLocked(s, n, &evicted, &quota_freeing)) return;  // stays host-only
    // Room on SSD: sessions that live only there leave the store, in the policy's order.
    if (ssd_->free_blocks() + quota_freeing < n) {
      std::vector<PlacementCandidate> candidates;
      for (auto& [k, v] : sessions_) {
        if (v.get() == &s || !v->host.empty() || !v->persisted || v->readers > 0) continue;
        candidates.push_back({k, v->last_use, v->inserted});
      }
      placement_.OrderVictims(candidates, RoomFor::kLeaveStore);
      std::vector<std::string> victims;
      int64_t could_free = ssd_->free_blocks() + quota_freeing;
      for (const PlacementCandidate& c : candidates) {
        victims.emplace_back(c.key);
        could_free += static_cast<int64_t>(sessions_.at(c.key)->ssd.size());
      }
      // Only when the room can be made: evicting for a write that still does not fit
      // would delete persisted sessions for nothing.
      if (could_free < n) victims.clear();
      int64_t freeing = quota_freeing;
      for (const std::string& victim_key : victims) {
        if (ssd_->free_blocks() + freeing >= n) break;
        Session& victim = *sessions_.at(victim_key);
        freeing += static_cast<int64_t>(victim.ssd.size());
        ++stats_.persisted_deleted;
        LOG(INFO) << "session '" << victim.session_id << "' of tenant '" << victim.tenant << "': its persisted copy ("
                  << victim.committed_tokens.size() << " tokens) is deleted: the SSD tier needed its room";
        ++tenant_stats_[victim.tenant].evictions;
        evicted.push_back({SessionKey{victim.tenant, victim.session_id}, std::move(victim.ssd)});
        sessions_.erase(victim_key);  // `victim` is gone
        ++stats_.evictions;
        ++stats_.evictions_ssd_full;
        // Their blocks are freed below, once their records are deleted.
      }
    }
    if (!evicted.empty()) {
      mu_.Unlock();
      std::vector<SsdLocation> freeable;
      for (auto& [key, blocks] : evicted) {
        absl::Status d = index_->Delete(key.tenant, key.session_id);
        if (d.ok() || absl::IsNotFound(d)) freeable.insert(freeable.end(), blocks.begin(), blocks.end());
      }
      // Not synced here: the sync of the chunks written below covers the erasures (a
      // session evicted for room that comes back from a rebuild after a power cut is only
      // a cache entry back).
      RetireSsdBlocks(freeable, /*sync=*/false);
      mu_.Lock();
      it = sessions_.find(map_key);
      if (it == sessions_.end() || it->second->version != version || it->second->host.empty()) return;
    }
    Session& cur = *it->second;
    if (ssd_->free_blocks() < n) {
      // Host-only until room appears: written back when blocks come free (RetireSsdBlocks).
      waiting_for_room_.insert(map_key);
      return;
    }
    for (int64_t c = 0; c < n; ++c) {
      targets.push_back(*ssd_->Allocate());
      // The reference keeps the block's bytes unchanged until the write ends (nothing
      // writes an allocated block but Save's fill, into blocks it has just allocated, and
      // this write-back, into a partial chunk's rows past its tokens, below).
      host_->Ref(cur.host[c]);
      host_blocks.push_back(cur.host[c]);
      blocks.push_back(host_->Block(cur.host[c]));
      sealed.push_back(cur.checksums[c]);
    }
    record.tenant = cur.tenant;
    record.session_id = cur.session_id;
    record.generation = NextGenerationLocked();
    born = cur.born;
    record.model_fingerprint = options_.model_fingerprint;
    record.tokens = cur.tokens;
    record.base = cur.base;
    record.last_access_unix_ms = cur.last_access_unix_ms;
    for (int64_t c = 0; c < n; ++c) {
      record.chunks.push_back(IndexedChunk{targets[c].file, targets[c].offset,
                                           static_cast<uint32_t>(std::min<int64_t>(
                                               layout.chunk_tokens,
                                               static_cast<int64_t>(cur.tokens.size()) - c * layout.chunk_tokens)),
                                           0});  // the checksum is filled in below
    }
  }

  // Hash every payload here, outside the lock and off the thread that saved it: an
  // unsealed chunk gets its checksum; a sealed one (kept from an earlier version, or
  // promoted from SSD) must still match it, or it is not persisted.
  size_t bad = blocks.size();
  absl::Status why;
  std::vector<uint64_t> checksums(blocks.size());
  for (size_t c = 0; c < blocks.size(); ++c) {
    ChunkHeaderFacts facts;
    why = VerifyChunkHeader(layout, options_.model_fingerprint, blocks[c], &facts);
    // An unsealed partial chunk's unused rows still hold the block's earlier bytes: zeroed
    // before the hash, so the disk holds none of them (readers of the block read only the
    // rows of its tokens).
    if (why.ok() && !sealed[c].has_value()) ZeroRowsPast(layout, facts.tokens, blocks[c]);
    if (why.ok()) checksums[c] = ChunkPayloadChecksum(layout, blocks[c]);
    if (why.ok() && sealed[c].has_value()) {
      if (!facts.sealed || facts.payload_checksum != *sealed[c]) {
        why = absl::DataLossError("chunk header does not hold the checksum it was sealed with");
      } else if (checksums[c] != *sealed[c]) {
        why = absl::DataLossError("chunk payload no longer matches its sealed checksum");
      }
    }
    if (!why.ok()) {
      bad = c;
      break;
    }
    record.chunks[c].checksum = checksums[c];
  }

  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(map_key);
    Session* s = it == sessions_.end() ? nullptr : it->second.get();
    // Seal the headers before the blocks go to SSD (under the lock: Lease reads headers),
    // each with the descriptor of the version written, so that the data file alone can
    // rebuild its record (index_rebuild.h). A chunk kept from an earlier version gets this
    // version's descriptor; its payload checksum does not change.
    bool described = true;
    for (size_t c = 0; c < bad; ++c) {
      if (bad == blocks.size()) {
        described = SealChunkHeader(blocks[c], checksums[c], DescriptorOf(record, c, layout.chunk_tokens)) && described;
      } else if (!sealed[c].has_value()) {
        SealChunkHeader(blocks[c], checksums[c]);
      }
      if (sealed[c].has_value()) continue;
      if (s != nullptr && c < s->host.size() && s->host[c] == host_blocks[c]) s->checksums[c] = checksums[c];
    }
    if (!described && undescribed_writes_++ % 1000 == 0) {
      LOG(WARNING) << "session '" << record.session_id << "' of tenant '" << record.tenant
                   << "' is persisted without chunk descriptors (its names and a chunk's token IDs do not fit a "
                   << kChunkHeaderBytes << "-byte header page; " << undescribed_writes_
                   << " versions so far): should the index be lost, it cannot be rebuilt from the data file";
    }
    if (bad < blocks.size()) {
      // Cut the session there if it still holds those bytes; a newer version holding
      // others has its own write-back coming.
      if (s != nullptr && bad < s->host.size() && s->host[bad] == host_blocks[bad]) {
        CutCorruptLocked(map_key, *s, bad, why);
      }
      for (uint32_t b : host_blocks) host_->Free(b);
      for (const SsdLocation& loc : targets) ssd_->Free(loc);
      return;
    }
  }

  // Chunks first, then the durability point, then the record that names them.
  IoBatch batch;
  for (size_t c = 0; c < targets.size(); ++c) ssd_->Write(targets[c], blocks[c].data(), batch.Callback());
  absl::Status status = batch.Wait();
  if (status.ok()) status = ssd_->Sync();
  if (status.ok()) {
    // A session dropped (and perhaps saved anew) while its blocks were being written must
    // not get its record back. (A drop after this check queues its record's deletion
    // behind this job: the persist thread runs them in order.)
    MutexLock lock(&mu_);
    auto it = sessions_.find(map_key);
    if (it == sessions_.end() || it->second->born != born) {
      for (uint32_t b : host_blocks) host_->Free(b);
      RetireLocked(std::move(targets), /*sync=*/true);  // a complete version of a session that left
      return;
    }
  }
  const bool put = status.ok();
  if (put) status = index_->Put(record);

  MutexLock lock(&mu_);
  for (uint32_t b : host_blocks) host_->Free(b);
  if (!status.ok()) {
    // A Put that failed may still be in the index's log, and come back when the index is
    // opened again: its blocks (written and synced) stay taken until the next start, whose
    // recovery frees them unless a record names them. Blocks of a failed write are freed.
    if (!put) RetireLocked(std::move(targets), /*sync=*/false);  // some may be written
    EnterDegradedLocked(status);
    return;
  }
  stats_.ssd_bytes_written += static_cast<int64_t>(targets.size()) * layout.BlockBytes();
  ++stats_.persisted_saves;
  auto it = sessions_.find(map_key);
  if (it == sessions_.end() || it->second->born != born) {
    // Dropped while being written (after the check above): the record just committed
    // names `targets`. The drop queued its record's deletion behind this job; the blocks
    // come free with it (a session saved anew meanwhile queues its own write-back after
    // that deletion, so nothing here may delete its record).
    for (PersistJob& queued : persist_queue_) {
      if (queued.drop && queued.tenant == record.tenant && queued.session_id == record.session_id) {
        queued.free_after.insert(queued.free_after.end(), targets.begin(), targets.end());
        return;
      }
    }
    PersistJob drop;
    drop.drop = true;
    drop.tenant = record.tenant;
    drop.session_id = record.session_id;
    drop.free_after = std::move(targets);
    persist_queue_.push_back(std::move(drop));
    return;
  }
  Session& s = *it->second;
  // The committed record now names `targets`; the blocks of the previous record are free
  // (once a promotion that reads them is done).
  if (s.promotion != nullptr) {
    s.promotion->free_after.insert(s.promotion->free_after.end(), s.ssd.begin(), s.ssd.end());
  } else {
    // Not synced: the next write-back's sync covers it, and should a power cut come first,
    // a rebuild prefers this newer version anyway.
    RetireLocked(std::move(s.ssd), /*sync=*/false);
  }
  s.ssd = std::move(targets);
  s.committed_tokens = record.tokens;
  s.committed_base = record.base;
  s.committed_checksums.clear();
  for (const IndexedChunk& c : record.chunks) s.committed_checksums.push_back(c.checksum);
  s.persisted = s.version == version;
  if (!s.persisted && s.host.empty() && s.filling == 0) {
    // The version written was dropped from host meanwhile (the session fell back to an
    // older record): what was just committed is newer than that, and is what it holds now
    // (a promotion of the older record in flight is not applied).
    UseCommittedLocked(s);
  }
}

void SessionStoreImpl::EnterDegradedLocked(const absl::Status& why) {
  ++stats_.ssd_write_errors;
  if (degraded_) return;
  degraded_ = true;
  LOG(ERROR) << "SSD tier write failed (" << why
             << "); continuing with host-only caching. Sessions persisted before this stay "
                "readable; persisting resumes by itself once the SSD's file systems have room again.";
  std::erase_if(persist_queue_, [](const PersistJob& j) { return !j.drop && !j.retire; });
}

void SessionStoreImpl::TryLeaveDegraded() {
  for (const std::string& dir : options_.ssd_dirs) {
    const int64_t free_bytes = SessionIndex::FreeBytes(dir);
    if (free_bytes >= 0 && free_bytes < SessionIndex::kMinFreeBytes) return;  // still full
  }
  bool pending;
  {
    MutexLock lock(&mu_);
    pending = rebuild_pending_;
  }
  // The next start must rebuild the index the records written from now on join.
  if (pending && !MarkRebuildPending()) return;
  if (absl::Status s = index_->ReopenWritable(); !s.ok()) return;
  MutexLock lock(&mu_);
  if (!degraded_) return;
  degraded_ = false;
  int waiting = 0;
  for (const auto& [key, s] : sessions_) {
    if (!s->host.empty() && !s->persisted && s->filling == 0) {
      EnqueueWriteBackLocked(key, *s);
      ++waiting;
    }
  }
  // The drops first: a session dropped and saved anew meanwhile has its new record put
  // after its old one is deleted, not before.
  for (auto it = deferred_drops_.rbegin(); it != deferred_drops_.rend(); ++it) persist_queue_.push_front(std::move(*it));
  deferred_drops_.clear();
  LOG(INFO) << "the SSD tier and its index are writable again: persisting resumes (" << waiting
            << " sessions to write back)";
}

void SessionStoreImpl::SweepExpiredLocked() {
  std::vector<std::string> expired;
  for (const auto& [k, s] : sessions_) {
    if (s->readers == 0 && ExpiredLocked(*s)) expired.push_back(k);
  }
  for (const std::string& k : expired) RemoveLocked(k, "its TTL passed");
  stats_.expired += static_cast<int64_t>(expired.size());
}

absl::Status SessionStoreImpl::AwaitWriteBacks(absl::Duration timeout) {
  if (ssd_ == nullptr) return absl::OkStatus();
  MutexLock lock(&mu_);
  const bool done = mu_.AwaitWithTimeout(
      [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return degraded_ || (persist_queue_.empty() && persist_busy_ == 0);
      },
      timeout);
  if (done) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(persist_queue_.size(), " write-backs still queued"));
}

absl::Status SessionStoreImpl::Flush(const SessionKey& key, absl::Duration timeout) {
  if (ssd_ == nullptr) return absl::FailedPreconditionError("there is no SSD tier to persist to");
  const std::string map_key = SessionMapKey(key);
  MutexLock lock(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = sessions_.find(map_key);
    return it == sessions_.end() || it->second->persisted || it->second->dropped_newer != nullptr || degraded_ ||
           it->second->over_ssd_quota;
  };
  bool done = mu_.AwaitWithTimeout(settled, timeout);
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  const Session& s = *it->second;
  if (s.dropped_newer != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the session's last version was dropped before it was persisted (", s.dropped_newer,
        "); it holds its persisted ", s.tokens.size(), " tokens"));
  }
  if (s.persisted) return absl::OkStatus();
  if (s.over_ssd_quota) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session '", key.session_id, "' does not fit its tenant's SSD quota: it stays host-only"));
  }
  if (degraded_) return absl::FailedPreconditionError("the SSD tier is degraded: nothing can be persisted");
  (void)done;
  return absl::DeadlineExceededError("the session was not persisted in time");
}

}  // namespace strata::storage
