// SessionStoreImpl: promotion of sessions held only on SSD back to host memory, and the
// scheduler-aware look-ahead that starts promotions before a queued turn needs them
// (prefetch window) and keeps queued sessions from being evicted (eviction window).
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "storage/io_batch.h"
#include "storage/session_store_impl.h"

namespace strata::storage {

void SessionStoreImpl::Promote(const SessionKey& key, PromoteDone done) { PromoteFor(key, std::move(done), false); }

void SessionStoreImpl::PromoteFor(const SessionKey& key, PromoteDone done, bool prefetch) {
  const std::string map_key = SessionMapKey(key);
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
        promotion->targets = targets;
        promotion->checksums = s->checksums;  // the committed record's: the session is persisted
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

void SessionStoreImpl::FinishPromotion(const std::string& map_key, const std::shared_ptr<Promotion>& promotion,
                                   absl::Status io) {
  const absl::Time io_done = absl::Now();
  const ChunkLayout& layout = options_.layout;
  // Verify in full, outside the lock (the blocks are this promotion's alone until it is
  // applied below), against the checksums the committed record holds: a block that holds
  // anything else (a torn write, another session's chunk) is cut off with what follows.
  size_t good = 0;
  absl::Status bad;
  if (io.ok()) {
    for (; good < promotion->targets.size(); ++good) {
      absl::Span<const std::byte> block(promotion->targets[good], static_cast<size_t>(layout.BlockBytes()));
      ChunkHeaderFacts facts;
      bad = VerifyChunkHeader(layout, options_.model_fingerprint, block, &facts);
      const std::optional<uint64_t>& named = promotion->checksums[good];
      if (bad.ok() && (!facts.sealed || !named.has_value() || facts.payload_checksum != *named)) {
        bad = absl::DataLossError("chunk is not the one the index record names");
      }
      if (bad.ok() && ChunkPayloadChecksum(layout, block) != facts.payload_checksum) {
        bad = absl::DataLossError("chunk payload checksum mismatch");
      }
      if (!bad.ok()) break;
    }
  }
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
    RetireLocked(std::move(promotion->free_after), /*sync=*/false);  // a record replaced during the reads
    promotion->free_after.clear();
    std::vector<uint32_t> blocks = std::move(promotion->blocks);
    if (!io.ok() || s == nullptr || s->version != promotion->version) {
      for (uint32_t b : blocks) host_->Free(b);
      result = io.ok() ? absl::AbortedError("the session was saved or dropped during its promotion") : io;
      if (!io.ok()) ++stats_.promotion_failures;
    } else {
      const int64_t bytes = static_cast<int64_t>(blocks.size()) * layout.BlockBytes();
      stats_.ssd_bytes_read += bytes;
      const double seconds = absl::ToDoubleSeconds(io_done - promotion->start);
      if (seconds > 0) {
        const double rate = static_cast<double>(bytes) / seconds;
        ssd_read_bytes_per_second_ =
            ssd_read_bytes_per_second_ == 0 ? rate : 0.8 * ssd_read_bytes_per_second_ + 0.2 * rate;
      }
      const size_t n = blocks.size();
      if (good < n) {
        ++stats_.corrupt_chunks;
        LOG(WARNING) << "session '" << s->session_id << "' SSD chunk " << good << " is not served: " << bad;
      }
      for (size_t c = good; c < n; ++c) host_->Free(blocks[c]);
      blocks.resize(good);
      s->host = std::move(blocks);
      if (good < n) {
        s->tokens.resize(std::min(s->tokens.size(), good * static_cast<size_t>(layout.chunk_tokens)));
        s->checksums.resize(good);
        s->persisted = false;  // the record names bytes that are gone
        s->version = ++versions_;
      }
      if (s->tokens.empty()) {
        ++stats_.promotion_failures;
        RemoveLocked(map_key, "no chunk of it survived verification");  // the record goes too
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

std::vector<SessionKey> SessionStoreImpl::PrefetchCandidatesLocked() {
  stats_.lookahead_sessions = placement_.lookahead_length();
  if (ssd_ == nullptr || placement_.policy() != PlacementPolicy::kSchedulerAware || sessions_.empty()) return {};
  int64_t chunks = 0;
  // Host room a prefetch may use: free blocks, and blocks of host copies outside the
  // look-ahead that are also on SSD (demoting them loses nothing).
  int64_t prefetch_room = host_->free_blocks();
  for (const auto& [k, s] : sessions_) {
    chunks += static_cast<int64_t>(std::max(s->host.size(), s->ssd.size()));
    if (!s->host.empty() && s->persisted && s->readers == 0 && !placement_.InLookAhead(k) && !LeasedLocked(*s)) {
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

void SessionStoreImpl::StartPrefetches(const std::vector<SessionKey>& keys) {
  // Nearest first; a prefetch that finds no room (only queued or hinted sessions left to
  // demote) fails and evicts nothing.
  for (const SessionKey& key : keys) PromoteFor(key, [](absl::Status) {}, /*prefetch=*/true);
}

void SessionStoreImpl::SetLookAhead(const std::vector<SessionKey>& queued) {
  std::vector<SessionKey> prefetch;
  {
    MutexLock lock(&mu_);
    std::vector<std::string> keys;
    keys.reserve(queued.size());
    for (const SessionKey& k : queued) keys.push_back(SessionMapKey(k));
    placement_.SetQueue(keys);
    prefetch = PrefetchCandidatesLocked();
  }
  StartPrefetches(prefetch);
}

bool SessionStoreImpl::Hint(const SessionKey& key) {
  std::vector<SessionKey> prefetch;
  {
    MutexLock lock(&mu_);
    const std::string map_key = SessionMapKey(key);
    if (!sessions_.contains(map_key)) return false;
    placement_.Hint(map_key);
    prefetch = PrefetchCandidatesLocked();
  }
  StartPrefetches(prefetch);
  return true;
}

double SessionStoreImpl::ssd_read_bytes_per_second() const {
  MutexLock lock(&mu_);
  return ssd_read_bytes_per_second_;
}

}  // namespace strata::storage
