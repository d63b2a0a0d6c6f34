// SessionStoreImpl: making room. In the host tier, host copies go in the placement policy's
// order (demoted when on SSD, else evicted). Within a tenant's quota of a tier
// (tenant_quota.h), room is made among that tenant's own sessions, in the same order, and
// only when all of it can be made; a tenant's use is read from its sessions (the blocks
// they hold), so it cannot drift from what the tiers hold. (The SSD tier's own room is
// made in the write-back, session_persistence.cc.)
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/mutex.h"
#include "storage/session_store_impl.h"

namespace strata::storage {
namespace {

// A refusal that repeats is logged once per this many, with the count.
constexpr int64_t kLogEvery = 1000;

}  // namespace

std::vector<std::string> SessionStoreImpl::HostVictimsLocked(const Session* keep, RoomFor purpose,
                                                             const std::string* tenant) {
  std::vector<PlacementCandidate> candidates;
  for (auto& [k, s] : sessions_) {
    // A leased session's blocks would not come free: taking it would only cost its host copy.
    if (s.get() == keep || s->host.empty() || s->readers > 0 || LeasedLocked(*s)) continue;
    if (tenant != nullptr && s->tenant != *tenant) continue;
    candidates.push_back({k, s->last_use, s->inserted});
  }
  placement_.OrderVictims(candidates, purpose);
  std::vector<std::string> victims;
  for (const PlacementCandidate& c : candidates) {
    // A prefetch only demotes (copies that stay on SSD); it never makes anything a miss.
    if (purpose == RoomFor::kHostPrefetch && !sessions_.at(c.key)->persisted) continue;
    victims.emplace_back(c.key);
  }
  return victims;
}

bool SessionStoreImpl::TakeHostCopyLocked(const std::string& key, bool quota) {
  Session& victim = *sessions_.at(key);
  if (victim.persisted) {
    if (victim.prefetched) ++stats_.prefetch_wasted;
    victim.prefetched = false;
    DropHostLocked(victim, 0);  // the SSD copy stays: a demotion
    ++stats_.demotions;
    return true;
  }
  if (!placement_.MayLeaveStore(key)) return false;  // queued within the eviction window: it stays
  // Not yet on SSD: this version goes; an older persisted one stays.
  if (victim.ssd.empty()) {
    ++stats_.evictions;
    ++(quota ? stats_.evictions_host_quota : stats_.evictions_host_full);
    ++tenant_stats_[victim.tenant].evictions;
  }
  DropNewerVersionLocked(key, quota ? "its tenant's host quota needed its room" : "the host tier needed its room");
  return true;
}

bool SessionStoreImpl::MakeHostRoomLocked(int64_t blocks, const Session* keep, RoomFor purpose, bool* over_quota) {
  if (over_quota != nullptr) *over_quota = false;
  if (host_->free_blocks() < blocks) {
    // All or nothing: a save or prefetch that cannot fit even with every session that may
    // go gone takes no one's room (not even its own tenant's).
    int64_t could_free = host_->free_blocks();
    for (const std::string& key : HostVictimsLocked(keep, purpose, nullptr)) {
      const Session& v = *sessions_.at(key);
      if (v.persisted || placement_.MayLeaveStore(key)) could_free += static_cast<int64_t>(v.host.size());
    }
    if (could_free < blocks) return false;
  }
  bool own_only = false;
  if (keep != nullptr && !MakeHostQuotaRoomLocked(blocks, *keep, purpose, &own_only)) {
    if (over_quota != nullptr) *over_quota = true;
    return false;
  }
  if (host_->free_blocks() >= blocks) return true;
  // A tenant that had to make room within its quota takes none from another tenant, not
  // even when blocks it gave up are still held (by a write to SSD in flight).
  for (const std::string& key : HostVictimsLocked(keep, purpose, own_only ? &keep->tenant : nullptr)) {
    if (host_->free_blocks() >= blocks) break;
    const int64_t free_before = host_->free_blocks();
    if (!TakeHostCopyLocked(key, /*quota=*/false)) continue;
    if (host_->free_blocks() == free_before) {
      // Its blocks are still being written to SSD; they come back when the write ends.
      // Taking more victims for them would empty the tier, so give up for now.
      return false;
    }
  }
  return host_->free_blocks() >= blocks;
}

int64_t SessionStoreImpl::QuotaBlocks(int64_t bytes) const {
  return bytes <= 0 ? 0 : bytes / options_.layout.BlockBytes();
}

SessionStoreImpl::TenantBlocks SessionStoreImpl::TenantBlocksLocked(const std::string& tenant) const {
  TenantBlocks used;
  for (const auto& [k, s] : sessions_) {
    if (s->tenant != tenant) continue;
    used.host += static_cast<int64_t>(s->host.size());
    if (s->promotion != nullptr) used.host += static_cast<int64_t>(s->promotion->blocks.size());
    used.ssd += static_cast<int64_t>(s->ssd.size());
  }
  return used;
}

bool SessionStoreImpl::MakeHostQuotaRoomLocked(int64_t blocks, const Session& keep, RoomFor purpose, bool* own_only) {
  *own_only = false;
  const int64_t quota = QuotaBlocks(options_.QuotaOf(keep.tenant).host_bytes);
  if (quota == 0) return true;
  int64_t used = TenantBlocksLocked(keep.tenant).host;  // with `keep`'s kept chunks
  if (used + blocks <= quota) return true;
  *own_only = true;
  const std::vector<std::string> victims = HostVictimsLocked(&keep, purpose, &keep.tenant);
  int64_t could_free = 0;
  for (const std::string& key : victims) {
    const Session& v = *sessions_.at(key);
    if (v.persisted || placement_.MayLeaveStore(key)) could_free += static_cast<int64_t>(v.host.size());
  }
  TenantCounters& mine = tenant_stats_[keep.tenant];
  if (used - could_free + blocks > quota) {
    // Another tenant's sessions are never taken for it: the save or promotion is refused.
    // (A prefetch that does not fit just does not start, as in a full tier: not counted.)
    if (purpose == RoomFor::kHostPrefetch) return false;
    ++stats_.quota_refused_host;
    if (mine.quota_refused_host++ % kLogEvery == 0) {
      LOG(WARNING) << "tenant '" << keep.tenant << "': session '" << keep.session_id << "' needs " << blocks
                   << " more host chunks and the tenant's own sessions cannot make the room within its host quota of "
                   << quota << " chunks (" << used << " in use); it is not cached on host (" << mine.quota_refused_host
                   << " such refusals so far for this tenant; a larger host quota would cache it)";
    }
    return false;
  }
  for (const std::string& key : victims) {
    if (used + blocks <= quota) break;
    const int64_t n = static_cast<int64_t>(sessions_.at(key)->host.size());
    if (!TakeHostCopyLocked(key, /*quota=*/true)) continue;  // `key` may be gone now
    used -= n;
    ++stats_.quota_evictions_host;
    ++tenant_stats_[keep.tenant].quota_evictions_host;
  }
  return used + blocks <= quota;
}

bool SessionStoreImpl::MakeSsdQuotaRoomLocked(Session& s, int64_t blocks,
                                              std::vector<std::pair<SessionKey, std::vector<SsdLocation>>>* evicted,
                                              int64_t* freeing) {
  s.over_ssd_quota = false;
  const int64_t quota = QuotaBlocks(options_.QuotaOf(s.tenant).ssd_bytes);
  if (quota == 0) return true;
  // Once this version is committed, the session's previous record (and its blocks) goes.
  int64_t used = TenantBlocksLocked(s.tenant).ssd - static_cast<int64_t>(s.ssd.size());
  if (used + blocks <= quota) return true;
  // The tenant's sessions that live only on SSD, as the SSD tier's own capacity policy takes them.
  std::vector<PlacementCandidate> candidates;
  for (auto& [k, v] : sessions_) {
    if (v.get() == &s || v->tenant != s.tenant || !v->host.empty() || !v->persisted || v->readers > 0) continue;
    candidates.push_back({k, v->last_use, v->inserted});
  }
  placement_.OrderVictims(candidates, RoomFor::kLeaveStore);
  int64_t could_free = 0;
  for (const PlacementCandidate& c : candidates) could_free += static_cast<int64_t>(sessions_.at(c.key)->ssd.size());
  TenantCounters& mine = tenant_stats_[s.tenant];
  if (used - could_free + blocks > quota) {
    // Deleting persisted sessions for a write that would still not fit helps nobody.
    s.over_ssd_quota = true;
    ++stats_.quota_refused_ssd;
    if (mine.quota_refused_ssd++ % kLogEvery == 0) {
      LOG(WARNING) << "tenant '" << s.tenant << "': session '" << s.session_id << "' needs " << blocks
                   << " SSD chunks and the tenant's own sessions held only on SSD cannot make the room within its "
                   << "SSD quota of " << quota << " chunks (" << used << " in use); it stays host-only, not persisted ("
                   << mine.quota_refused_ssd << " such refusals so far for this tenant; the SSD quota must hold more "
                   << "than the tenant's host copies, which are on SSD too)";
    }
    return false;
  }
  std::vector<std::string> victims;
  for (const PlacementCandidate& c : candidates) victims.emplace_back(c.key);
  for (const std::string& key : victims) {
    if (used + blocks <= quota) break;
    Session& victim = *sessions_.at(key);
    const int64_t n = static_cast<int64_t>(victim.ssd.size());
    used -= n;
    *freeing += n;
    ++stats_.persisted_deleted;
    LOG(INFO) << "session '" << victim.session_id << "' of tenant '" << victim.tenant << "': its persisted copy ("
              << victim.committed_tokens.size() << " tokens) is deleted: its tenant's SSD quota needed its room";
    ++stats_.evictions;
    ++stats_.evictions_ssd_quota;
    ++stats_.quota_evictions_ssd;
    ++mine.evictions;
    ++mine.quota_evictions_ssd;
    evicted->push_back({SessionKey{victim.tenant, victim.session_id}, std::move(victim.ssd)});
    sessions_.erase(key);  // `victim` is gone; its blocks are freed once its record is deleted
  }
  return true;
}

}  // namespace strata::storage
