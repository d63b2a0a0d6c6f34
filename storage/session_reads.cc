// Reading a stored session: the prefix a turn can reuse (Match, MatchAcrossCut: its
// tokens against the stored ones, across a context cut), the reuse counted, and the chunks
// handed out: leases on host blocks the caller copies from outside the lock (Lease,
// released by ChunkLease), or a visit under it (Read).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "storage/session_store_impl.h"

namespace strata::storage {

PrefixMatch SessionStoreImpl::Match(const SessionKey& key, absl::Span<const int32_t> tokens,
                                int64_t max_tokens, std::string_view base) {
  return MatchAcrossCut(key, tokens, /*cut=*/-1, max_tokens, base);
}

namespace {

// The longest run of `tail` found in `stored` after position `cut` (the first when several
// are as long): its offset past `cut` (the gap, >= 1) and length; {0, 0} when none. The
// comparisons are bounded by 64 x the stored tokens, so a repetitive session cannot make
// the lookup quadratic.
std::pair<int64_t, int64_t> FindRun(absl::Span<const int32_t> stored, int64_t cut, absl::Span<const int32_t> tail) {
  const int64_t ns = static_cast<int64_t>(stored.size());
  const int64_t nt = static_cast<int64_t>(tail.size());
  int64_t best_gap = 0, best = 0;
  int64_t budget = 64 * ns;
  for (int64_t gap = 1; cut + gap < ns && ns - cut - gap > best && budget > 0; ++gap) {
    int64_t m = 0;
    while (m < nt && cut + gap + m < ns && stored[cut + gap + m] == tail[m]) ++m;
    budget -= m + 1;
    if (m > best) {
      best = m;
      best_gap = gap;
    }
  }
  return {best_gap, best};
}

}  // namespace

void SessionStoreImpl::Touch(const SessionKey& key) {
  MutexLock lock(&mu_);
  const std::string map_key = SessionMapKey(key);
  auto it = sessions_.find(map_key);
  if (it == sessions_.end() || ExpiredLocked(*it->second)) return;  // an expired one goes by its TTL
  TouchLocked(*it->second);
  placement_.Used(map_key);
}

PrefixMatch SessionStoreImpl::MatchAcrossCut(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t cut,
                                             int64_t max_tokens, std::string_view base) {
  MutexLock lock(&mu_);
  ++stats_.lookups;
  TenantCounters& mine = tenant_stats_[key.tenant];
  ++mine.lookups;
  std::string map_key = SessionMapKey(key);
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) return {};
  Session& s = *it->second;
  if (ExpiredLocked(s) && s.readers == 0) {
    ++stats_.expired;
    RemoveLocked(map_key, "its TTL passed");
    return {};
  }
  if (s.filling != 0) return {};  // its payloads are still being copied in
  const bool on_host = !s.host.empty();
  if (!on_host && !s.persisted) return {};
  TouchLocked(s);
  placement_.Used(map_key);
  if (on_host && s.prefetched) ++stats_.prefetch_in_time;
  s.prefetched = false;
  const int64_t wanted = std::min<int64_t>(static_cast<int64_t>(tokens.size()), max_tokens);
  int64_t limit = std::min<int64_t>(wanted, static_cast<int64_t>(s.tokens.size()));
  int64_t n = 0;
  if (s.base == base) {
    while (n < limit && s.tokens[n] == tokens[n]) ++n;
  }
  PrefixMatch match{n, on_host ? Tier::kHost : Tier::kSsd, n, 0};
  if (s.base == base && cut >= 0 && n >= cut && cut < wanted) {
    const auto [gap, run] =
        FindRun(s.tokens, cut, tokens.subspan(static_cast<size_t>(cut), static_cast<size_t>(wanted - cut)));
    if (cut + run > n) {
      match.tokens = cut + run;
      match.kept = cut;
      match.gap = gap;
    }
  }
  if (match.tokens == 0) return {};
  ++stats_.hits;
  stats_.hit_tokens += match.tokens;
  ++mine.hits;
  mine.hit_tokens += match.tokens;
  return match;
}

void SessionStoreImpl::CountReuse(const SessionKey& key, int64_t matched, int64_t tokens) {
  if (tokens <= matched) return;
  MutexLock lock(&mu_);
  TenantCounters& mine = tenant_stats_[key.tenant];
  if (matched <= 0) {
    ++stats_.hits;
    ++mine.hits;
  }
  const int64_t more = tokens - std::max<int64_t>(0, matched);
  stats_.hit_tokens += more;
  mine.hit_tokens += more;
}

absl::StatusOr<ChunkLease> SessionStoreImpl::Lease(const SessionKey& key, int64_t tokens) {
  MutexLock lock(&mu_);
  const std::string map_key = SessionMapKey(key);
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  Session* s = it->second.get();
  if (s->filling != 0) return ChunkLease();  // its payloads are still being copied in
  if (s->host.empty()) {
    if (!s->persisted) return ChunkLease();
    // Promote, waiting (this caller only) for the SSD reads with the lock released.
    Notification promoted;
    absl::Status status;
    mu_.Unlock();
    PromoteFor(
        key,
        [&](absl::Status st) {
          status = std::move(st);
          promoted.Notify();
        },
        /*prefetch=*/false);
    promoted.WaitForNotification();
    mu_.Lock();
    if (!status.ok()) return ChunkLease();  // a miss; FinishPromotion counted and logged it
    it = sessions_.find(map_key);
    if (it == sessions_.end() || it->second->host.empty()) return ChunkLease();
    s = it->second.get();
  }
  tokens = std::min<int64_t>(tokens, static_cast<int64_t>(s->tokens.size()));
  const ChunkLayout& layout = options_.layout;
  std::vector<LeasedChunk> chunks;
  std::vector<uint32_t> blocks;
  int64_t leased = 0;
  for (size_t c = 0; c < s->host.size() && leased < tokens; ++c) {
    const uint32_t b = s->host[c];
    absl::Span<std::byte> block = host_->Block(b);
    // The header only: the payload was checked when it came from SSD and is checked again
    // before it goes there; a pass over it here would be on the turn's critical path.
    ChunkHeaderFacts facts;
    absl::Status ok = VerifyChunkHeader(layout, options_.model_fingerprint, block, &facts);
    const int64_t begin = static_cast<int64_t>(c) * layout.chunk_tokens;
    const int64_t expected =
        std::min<int64_t>(layout.chunk_tokens, static_cast<int64_t>(s->tokens.size()) - begin);
    if (ok.ok() && facts.tokens != expected) ok = absl::DataLossError("chunk token count mismatch");
    if (ok.ok() && facts.sealed && s->checksums[c].has_value() && facts.payload_checksum != *s->checksums[c]) {
      ok = absl::DataLossError("chunk header names another payload than the one sealed");
    }
    if (!ok.ok()) {
      CutCorruptLocked(map_key, *s, c, ok);  // may remove the session: `s` is not used again
      break;
    }
    host_->Ref(b);
    ++lease_pins_[b];
    blocks.push_back(b);
    const int count = static_cast<int>(std::min<int64_t>(facts.tokens, tokens - leased));
    chunks.push_back(LeasedChunk{begin, count,
                                 absl::Span<const std::byte>(ChunkPayload(block),
                                                             static_cast<size_t>(layout.PayloadBytes()))});
    leased += count;
  }
  if (!blocks.empty()) ++leases_out_;
  return MakeLease(std::move(chunks), std::move(blocks));
}

void SessionStoreImpl::ReleaseLease(std::vector<uint32_t> blocks) {
  MutexLock lock(&mu_);
  for (uint32_t b : blocks) {
    --lease_pins_[b];
    host_->Free(b);  // the session's own reference (if it still has the block) remains
  }
  --leases_out_;
}

bool SessionStoreImpl::LeasedLocked(const Session& s) const {
  return std::any_of(s.host.begin(), s.host.end(), [this](uint32_t b) {
    mu_.AssertHeld();
    return lease_pins_[b] > 0;
  });
}

absl::StatusOr<int64_t> SessionStoreImpl::Read(const SessionKey& key, int64_t tokens, VisitFn visit) {
  absl::StatusOr<ChunkLease> lease = Lease(key, tokens);
  if (!lease.ok()) return lease.status();
  const absl::Time start = absl::Now();
  for (const LeasedChunk& c : lease->chunks()) visit(c.token_begin, c.count, c.payload);
  if (!lease->empty()) {
    const int64_t bytes = static_cast<int64_t>(lease->chunks().size()) * options_.layout.BlockBytes();
    MutexLock lock(&mu_);
    AddHostSampleLocked(false, bytes, absl::Now() - start);
  }
  return lease->tokens();  // the lease is released on return
}

void SessionStoreImpl::CutCorruptLocked(const std::string& map_key, Session& s, size_t chunk,
                                        const absl::Status& why) {
  ++stats_.corrupt_chunks;
  const size_t begin = chunk * static_cast<size_t>(options_.layout.chunk_tokens);
  LOG(WARNING) << "session '" << s.session_id << "' chunk " << chunk << " failed verification (" << why
               << "); it is neither served nor persisted, and the session is cut to its first " << begin
               << " tokens";
  // Its SSD copy (if any) is replaced by the cut version's, or deleted with the session.
  DropHostLocked(s, chunk);
  s.tokens.resize(std::min(begin, s.tokens.size()));
  s.checksums.resize(std::min(chunk, s.checksums.size()));
  s.persisted = false;
  s.version = ++versions_;
  if (s.tokens.empty()) {
    RemoveLocked(map_key, "its first chunk failed verification");
  } else {
    EnqueueWriteBackLocked(map_key, s);
  }
}

}  // namespace strata::storage
