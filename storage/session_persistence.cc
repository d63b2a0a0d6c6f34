// SessionStore, the SSD half: write-back and index commits, promotion, recovery, TTL.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "storage/io_batch.h"
#include "storage/session_store.h"
#include "xxhash.h"

namespace strata::storage {
namespace {

constexpr absl::Duration kSweepInterval = absl::Seconds(10);

}  // namespace

absl::Status SessionStore::Recover() {
  std::vector<SessionRecord> stale;
  std::vector<std::string> bad_keys;
  int recovered = 0;
  absl::Status scan = index_->ForEach(
      [&](const SessionRecord& r) {
        bool usable = r.model_fingerprint == options_.model_fingerprint && !r.chunks.empty() &&
                      !r.tokens.empty() &&
                      absl::FromUnixMillis(r.last_access_unix_ms) + options_.ttl >= absl::Now();
        const int64_t chunk_tokens = options_.layout.chunk_tokens;
        usable = usable && static_cast<int64_t>(r.chunks.size()) ==
                               (static_cast<int64_t>(r.tokens.size()) + chunk_tokens - 1) / chunk_tokens;
        for (const IndexedChunk& c : r.chunks) usable = usable && ssd_->IsValidLocation({c.file, c.offset});
        if (!usable) {
          stale.push_back(r);
          return;
        }
        auto s = std::make_unique<Session>();
        s->tenant = r.tenant;
        s->session_id = r.session_id;
        s->tokens = r.tokens;
        for (const IndexedChunk& c : r.chunks) {
          SsdLocation loc{c.file, c.offset};
          ssd_->MarkAllocated(loc);
          s->ssd.push_back(loc);
          s->checksums.push_back(c.checksum);
        }
        s->persisted = true;
        s->last_access_unix_ms = r.last_access_unix_ms;
        MutexLock lock(&mu_);
        s->last_use = ++clock_;
        s->inserted = s->last_use;
        sessions_[MapKey({r.tenant, r.session_id})] = std::move(s);
        ++recovered;
      },
      [&](std::string_view key, const absl::Status& why) {
        LOG(WARNING) << "index record is unreadable and is dropped: " << why;
        bad_keys.emplace_back(key);
      });
  if (!scan.ok()) return scan;
  for (const SessionRecord& r : stale) {
    if (absl::Status s = index_->Delete(r.tenant, r.session_id); !s.ok() && !absl::IsNotFound(s)) return s;
  }
  for (const std::string& key : bad_keys) {
    if (absl::Status s = index_->DeleteKey(key); !s.ok() && !absl::IsNotFound(s)) return s;
  }
  LOG(INFO) << "session index: recovered " << recovered << " persisted sessions, dropped "
            << stale.size() + bad_keys.size() << " stale or unreadable records";
  return absl::OkStatus();
}

void SessionStore::PersistLoop() {
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

void SessionStore::RunPersistJob(PersistJob job) {
  if (!job.drop) {
    WriteBack(job.map_key, job.version);
    return;
  }
  absl::Status s = index_->Delete(job.tenant, job.session_id);
  if (!s.ok() && !absl::IsNotFound(s)) {
    // The record may still name these blocks: keep them allocated rather than risk
    // another session's bytes under this record after a restart.
    LOG(ERROR) << "cannot delete index record of session '" << job.session_id << "': " << s;
    return;
  }
  for (const SsdLocation& loc : job.free_after) ssd_->Free(loc);
}

void SessionStore::WriteBack(const std::string& map_key, uint64_t version) {
  SessionRecord record;
  std::vector<uint32_t> host_blocks;
  std::vector<const std::byte*> sources;
  std::vector<SsdLocation> targets;
  std::vector<std::pair<SessionKey, std::vector<SsdLocation>>> evicted;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(map_key);
    if (degraded_ || it == sessions_.end() || it->second->version != version || it->second->host.empty()) {
      return;  // dropped, demoted before it was written, or a newer version will follow
    }
    Session& s = *it->second;
    const int64_t n = static_cast<int64_t>(s.host.size());
    // Room on SSD: sessions that live only there leave the store, in the policy's order.
    if (ssd_->free_blocks() < n) {
      std::vector<PlacementCandidate> candidates;
      for (auto& [k, v] : sessions_) {
        if (v.get() == &s || !v->host.empty() || !v->persisted || v->readers > 0) continue;
        candidates.push_back({k, v->last_use, v->inserted});
      }
      placement_.OrderVictims(candidates, RoomFor::kLeaveStore);
      std::vector<std::string> victims;
      for (const PlacementCandidate& c : candidates) victims.emplace_back(c.key);
      int64_t freeing = 0;
      for (const std::string& victim_key : victims) {
        if (ssd_->free_blocks() + freeing >= n) break;
        Session& victim = *sessions_.at(victim_key);
        freeing += static_cast<int64_t>(victim.ssd.size());
        evicted.push_back({SessionKey{victim.tenant, victim.session_id}, std::move(victim.ssd)});
        sessions_.erase(victim_key);
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
      for (const SsdLocation& loc : freeable) ssd_->Free(loc);
      mu_.Lock();
      it = sessions_.find(map_key);
      if (it == sessions_.end() || it->second->version != version || it->second->host.empty()) return;
    }
    Session& cur = *it->second;
    if (ssd_->free_blocks() < n) return;  // stays host-only until room appears
    for (int64_t c = 0; c < n; ++c) {
      targets.push_back(*ssd_->Allocate());
      host_->Ref(cur.host[c]);
      host_blocks.push_back(cur.host[c]);
      sources.push_back(host_->Block(cur.host[c]).data());
    }
    record.tenant = cur.tenant;
    record.session_id = cur.session_id;
    record.model_fingerprint = options_.model_fingerprint;
    record.tokens = cur.tokens;
    record.last_access_unix_ms = cur.last_access_unix_ms;
    for (int64_t c = 0; c < n; ++c) {
      record.chunks.push_back(IndexedChunk{targets[c].file, targets[c].offset,
                                           static_cast<uint32_t>(std::min<int64_t>(
                                               options_.layout.chunk_tokens,
                                               static_cast<int64_t>(cur.tokens.size()) - c * options_.layout.chunk_tokens)),
                                           cur.checksums[c]});
    }
  }

  // Chunks first, then the durability point, then the record that names them.
  IoBatch batch;
  for (size_t c = 0; c < targets.size(); ++c) ssd_->Write(targets[c], sources[c], batch.Callback());
  absl::Status status = batch.Wait();
  if (status.ok()) status = ssd_->Sync();
  if (status.ok()) status = index_->Put(record);

  MutexLock lock(&mu_);
  for (uint32_t b : host_blocks) host_->Free(b);
  if (!status.ok()) {
    for (const SsdLocation& loc : targets) ssd_->Free(loc);
    EnterDegradedLocked(status);
    return;
  }
  stats_.ssd_bytes_written += static_cast<int64_t>(targets.size()) * options_.layout.BlockBytes();
  ++stats_.persisted_saves;
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) {
    // Dropped while being written: the record just committed names `targets`.
    PersistJob drop;
    drop.drop = true;
    drop.tenant = record.tenant;
    drop.session_id = record.session_id;
    drop.free_after = std::move(targets);
    persist_queue_.push_back(std::move(drop));
    return;
  }
  Session& s = *it->second;
  // The committed record now names `targets`; the blocks of the previous record are free.
  for (const SsdLocation& loc : s.ssd) ssd_->Free(loc);
  s.ssd = std::move(targets);
  s.persisted = s.version == version;
}

void SessionStore::EnterDegradedLocked(const absl::Status& why) {
  ++stats_.ssd_write_errors;
  if (degraded_) return;
  degraded_ = true;
  LOG(ERROR) << "SSD tier write failed (" << why
             << "); continuing with host-only caching. Sessions persisted before this stay "
                "readable; free space or replace the device and restart to persist again.";
  std::erase_if(persist_queue_, [](const PersistJob& j) { return !j.drop; });
}

void SessionStore::SweepExpiredLocked() {
  std::vector<std::string> expired;
  for (const auto& [k, s] : sessions_) {
    if (s->readers == 0 && ExpiredLocked(*s)) expired.push_back(k);
  }
  for (const std::string& k : expired) RemoveLocked(k);
  stats_.expired += static_cast<int64_t>(expired.size());
}

void SessionStore::Promote(const SessionKey& key, PromoteDone done) { PromoteFor(key, std::move(done), false); }

void SessionStore::PromoteFor(const SessionKey& key, PromoteDone done, bool prefetch) {
  const std::string map_key = MapKey(key);
  std::shared_ptr<Promotion> promotion;
  std::vector<SsdLocation> sources;
  std::vector<std::byte*> targets;
  absl::Status now;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(map_key);
    Session* s = it == sessions_.end() ? nullptr : it->second.get();
    if (s == nullptr || (s->host.empty() && !s->persisted)) {
      now = absl::NotFoundError(absl::StrCat("session '", key.session_id, "' has no stored copy to promote"));
    } else if (!s->host.empty()) {
      now = absl::OkStatus();
    } else if (s->promotion != nullptr) {
      // One promotion serves every caller; a turn that has to wait for a prefetch makes it late.
      if (!prefetch && s->promotion->prefetch && !s->promotion->late) {
        s->promotion->late = true;
        ++stats_.prefetch_late;
      }
      s->promotion->waiters.push_back(std::move(done));
      return;
    } else {
      const int64_t n = static_cast<int64_t>(s->ssd.size());
      if (!MakeHostRoomLocked(n, s, prefetch ? RoomFor::kHostPrefetch : RoomFor::kHost)) {
        if (!prefetch) ++stats_.promotion_failures;
        now = absl::ResourceExhaustedError(absl::StrCat("no room on the host tier for ", n, " chunks"));
      } else {
        promotion = std::make_shared<Promotion>();
        promotion->version = s->version;
        promotion->prefetch = prefetch;
        promotion->start = absl::Now();
        if (prefetch) ++stats_.prefetches;
        promotion->waiters.push_back(std::move(done));
        for (int64_t c = 0; c < n; ++c) {
          promotion->blocks.push_back(*host_->Allocate());
          targets.push_back(host_->Block(promotion->blocks.back()).data());
        }
        sources = s->ssd;
        s->promotion = promotion;
        ++s->readers;  // keeps the SSD copy from being evicted while it is read
        ++promotions_in_flight_;
      }
    }
  }
  if (promotion == nullptr) {
    done(now);
    return;
  }
  // Reads are issued outside the lock: a completion may run on any thread, at once.
  struct Pending {
    Mutex mu;
    size_t left ABSL_GUARDED_BY(mu);
    absl::Status status ABSL_GUARDED_BY(mu);
  };
  auto pending = std::make_shared<Pending>();
  {
    MutexLock lock(&pending->mu);
    pending->left = sources.size();
  }
  for (size_t c = 0; c < sources.size(); ++c) {
    ssd_->Read(sources[c], targets[c], [this, map_key, promotion, pending](absl::Status st) {
      absl::Status io;
      {
        MutexLock lock(&pending->mu);
        if (!st.ok() && pending->status.ok()) pending->status = std::move(st);
        if (--pending->left > 0) return;
        io = pending->status;
      }
      FinishPromotion(map_key, promotion, std::move(io));
    });
  }
}

void SessionStore::FinishPromotion(const std::string& map_key, const std::shared_ptr<Promotion>& promotion,
                                   absl::Status io) {
  std::vector<PromoteDone> waiters;
  absl::Status result;
  {
    MutexLock lock(&mu_);
    waiters = std::move(promotion->waiters);
    --promotions_in_flight_;
    auto it = sessions_.find(map_key);
    Session* s = it != sessions_.end() && it->second->promotion == promotion ? it->second.get() : nullptr;
    if (s != nullptr) {
      --s->readers;
      s->promotion.reset();
    }
    std::vector<uint32_t> blocks = std::move(promotion->blocks);
    if (!io.ok() || s == nullptr || s->version != promotion->version) {
      for (uint32_t b : blocks) host_->Free(b);
      result = io.ok() ? absl::AbortedError("the session was saved or dropped during its promotion") : io;
      if (!io.ok()) ++stats_.promotion_failures;
    } else {
      const int64_t bytes = static_cast<int64_t>(blocks.size()) * options_.layout.BlockBytes();
      stats_.ssd_bytes_read += bytes;
      const double seconds = absl::ToDoubleSeconds(absl::Now() - promotion->start);
      if (seconds > 0) {
        const double rate = static_cast<double>(bytes) / seconds;
        ssd_read_bytes_per_second_ =
            ssd_read_bytes_per_second_ == 0 ? rate : 0.8 * ssd_read_bytes_per_second_ + 0.2 * rate;
      }
      // Verify here, against the checksums the committed record holds: a block that holds
      // anything else (a torn write, another session's chunk) is cut off with what follows.
      size_t good = 0;
      for (; good < blocks.size(); ++good) {
        absl::Span<std::byte> block = host_->Block(blocks[good]);
        int held = 0;
        absl::Status ok = VerifyChunk(options_.layout, options_.model_fingerprint, block, &held);
        if (ok.ok() && XXH3_64bits(ChunkPayload(block), options_.layout.PayloadBytes()) != s->checksums[good]) {
          ok = absl::DataLossError("chunk is not the one the index record names");
        }
        if (!ok.ok()) {
          ++stats_.corrupt_chunks;
          LOG(WARNING) << "session '" << s->session_id << "' SSD chunk " << good << " is not served: " << ok;
          break;
        }
      }
      const size_t n = blocks.size();
      for (size_t c = good; c < n; ++c) host_->Free(blocks[c]);
      blocks.resize(good);
      s->host = std::move(blocks);
      if (good < n) {
        s->tokens.resize(std::min(s->tokens.size(), good * static_cast<size_t>(options_.layout.chunk_tokens)));
        s->checksums.resize(good);
        s->persisted = false;  // the record names bytes that are gone
        ++s->version;
      }
      if (s->tokens.empty()) {
        ++stats_.promotion_failures;
        RemoveLocked(map_key);  // nothing survived: the record goes too
        result = absl::DataLossError("no chunk of the session survived verification");
      } else {
        if (good < n) EnqueueWriteBackLocked(map_key, *s);  // replace the record with the verified prefix
        ++stats_.promotions;
        s->prefetched = promotion->prefetch && !promotion->late;
      }
    }
    if (!result.ok()) LOG(WARNING) << "promotion of a session from SSD failed: " << result;
  }
  for (PromoteDone& w : waiters) w(result);
}

absl::Status SessionStore::Flush(const SessionKey& key, absl::Duration timeout) {
  if (ssd_ == nullptr) return absl::FailedPreconditionError("there is no SSD tier to persist to");
  const std::string map_key = MapKey(key);
  MutexLock lock(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = sessions_.find(map_key);
    return it == sessions_.end() || it->second->persisted || degraded_;
  };
  bool done = mu_.AwaitWithTimeout(settled, timeout);
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  if (it->second->persisted) return absl::OkStatus();
  if (degraded_) return absl::FailedPreconditionError("the SSD tier is degraded: nothing can be persisted");
  (void)done;
  return absl::DeadlineExceededError("the session was not persisted in time");
}

}  // namespace strata::storage

namespace strata::storage {

std::vector<SessionKey> SessionStore::PrefetchCandidatesLocked() {
  stats_.lookahead_sessions = placement_.lookahead_length();
  if (ssd_ == nullptr || placement_.policy() != PlacementPolicy::kSchedulerAware || sessions_.empty()) return {};
  int64_t chunks = 0;
  // Host room a prefetch may use: free blocks, and blocks of host copies outside the
  // look-ahead that are also on SSD (demoting them loses nothing).
  int64_t prefetch_room = host_->free_blocks();
  for (const auto& [k, s] : sessions_) {
    chunks += static_cast<int64_t>(std::max(s->host.size(), s->ssd.size()));
    if (!s->host.empty() && s->persisted && s->readers == 0 && !placement_.InLookAhead(k)) {
      prefetch_room += static_cast<int64_t>(s->host.size());
    }
  }
  placement_.SetCapacity(prefetch_room, host_->total_blocks(), ssd_->total_blocks(),
                         static_cast<double>(chunks) / static_cast<double>(sessions_.size()));
  std::vector<SessionKey> out;
  for (const std::string& map_key : placement_.PrefetchOrder([this](const std::string& k) {
         mu_.AssertHeld();
         auto it = sessions_.find(k);
         return it != sessions_.end() && it->second->host.empty() && it->second->persisted &&
                it->second->promotion == nullptr;
       })) {
    const Session& s = *sessions_.at(map_key);
    out.push_back(SessionKey{s.tenant, s.session_id});
  }
  return out;
}

void SessionStore::StartPrefetches(const std::vector<SessionKey>& keys) {
  // Nearest first; a prefetch that finds no room (only queued or hinted sessions left to
  // demote) fails and evicts nothing.
  for (const SessionKey& key : keys) PromoteFor(key, [](absl::Status) {}, /*prefetch=*/true);
}

void SessionStore::SetLookAhead(const std::vector<SessionKey>& queued) {
  std::vector<SessionKey> prefetch;
  {
    MutexLock lock(&mu_);
    std::vector<std::string> keys;
    keys.reserve(queued.size());
    for (const SessionKey& k : queued) keys.push_back(MapKey(k));
    placement_.SetQueue(keys);
    prefetch = PrefetchCandidatesLocked();
  }
  StartPrefetches(prefetch);
}

bool SessionStore::Hint(const SessionKey& key) {
  std::vector<SessionKey> prefetch;
  {
    MutexLock lock(&mu_);
    const std::string map_key = MapKey(key);
    if (!sessions_.contains(map_key)) return false;
    placement_.Hint(map_key);
    prefetch = PrefetchCandidatesLocked();
  }
  StartPrefetches(prefetch);
  return true;
}

double SessionStore::ssd_read_bytes_per_second() const {
  MutexLock lock(&mu_);
  return ssd_read_bytes_per_second_;
}

}  // namespace strata::storage
