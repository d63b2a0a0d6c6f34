// SessionStoreImpl, recovery at start: the persisted sessions come back from the index,
// which is first rebuilt from the SSD data file's chunk headers when it was lost.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/durable_file.h"
#include "base/mutex.h"
#include "storage/index_rebuild.h"
#include "storage/session_store_impl.h"

namespace strata::storage {
namespace {

// Payloads read at once while a rebuild verifies a version (host blocks lent for it).
constexpr int kRebuildReadBlocks = 8;

}  // namespace

absl::Status SessionStoreImpl::Recover() {
  std::vector<SessionRecord> stale;
  std::vector<std::string> bad_keys;
  int recovered = 0, unbacked = 0;
  uint64_t newest = 0;  // the highest generation the records carry
  {
    MutexLock lock(&mu_);
    stats_.index_damaged = !index_->damage_note().empty();
    stats_.index_lost_writes = index_->lost_writes();
  }
  if (!RebuildIndexIfLost()) {
    if (!index_->damage_note().empty()) LOG(ERROR) << index_->damage_note();
    if (!index_->lost_note().empty()) LOG(ERROR) << index_->lost_note();
  }
  std::vector<SessionRecord> usable_records;
  // Sessions dropped while the index could not delete their records: those records (not
  // newer ones, written after the drop) are stale.
  const absl::flat_hash_map<std::string, uint64_t> dropped = pending_drops_.Load();
  auto was_dropped = [&](const SessionRecord& r) {
    auto d = dropped.find(SessionMapKey({r.tenant, r.session_id}));
    return d != dropped.end() && r.generation <= d->second;
  };
  absl::Status scan = index_->ForEach(
      [&](const SessionRecord& r) {
        bool usable = r.model_fingerprint == options_.model_fingerprint && !r.chunks.empty() && !r.tokens.empty() &&
                      absl::FromUnixMillis(r.last_access_unix_ms) + options_.ttl >= absl::Now() && !was_dropped(r);
        const int64_t chunk_tokens = options_.layout.chunk_tokens;
        usable = usable && static_cast<int64_t>(r.chunks.size()) ==
                               (static_cast<int64_t>(r.tokens.size()) + chunk_tokens - 1) / chunk_tokens;
        for (const IndexedChunk& c : r.chunks) usable = usable && ssd_->IsValidLocation({c.file, c.offset});
        if (usable) {
          for (const IndexedChunk& c : r.chunks) {
            if (ssd_->FoundAtOpen({c.file, c.offset})) continue;
            usable = false;
            ++unbacked;
            break;
          }
        }
        if (!usable) {
          stale.push_back(r);
          return;
        }
        usable_records.push_back(r);
      },
      [&](std::string_view key, const absl::Status& why) {
        LOG(WARNING) << "index record is unreadable and is dropped: " << why;
        bad_keys.emplace_back(key);
      });
  // A block two records name (a record the index brought back after its write failed, whose
  // blocks were reused since) belongs to the newer record: the one written after it. The
  // older is stale; its blocks are never served, erased or freed on its account. (A block
  // named twice at one generation, by one record or two, belongs to none.)
  struct Claim {
    uint64_t generation = 0;
    int claims = 0;  // at that generation
  };
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, Claim> owner;
  for (const SessionRecord& r : usable_records) {
    for (const IndexedChunk& c : r.chunks) {
      Claim& claim = owner[{c.file, c.offset}];
      if (claim.claims == 0 || r.generation > claim.generation) {
        claim = {r.generation, 1};
      } else if (r.generation == claim.generation) {
        ++claim.claims;
      }
    }
  }
  int double_claimed = 0;
  for (SessionRecord& r : usable_records) {
    const bool owns_all = std::all_of(r.chunks.begin(), r.chunks.end(), [&](const IndexedChunk& c) {
      const Claim& claim = owner.at({c.file, c.offset});
      return claim.generation == r.generation && claim.claims == 1;
    });
    if (!owns_all) {
      ++double_claimed;
      stale.push_back(std::move(r));
      continue;
    }
    auto s = std::make_unique<Session>();
    s->tenant = r.tenant;
    s->session_id = r.session_id;
    s->tokens = r.tokens;
    s->base = r.base;
    for (const IndexedChunk& c : r.chunks) {
      SsdLocation loc{c.file, c.offset};
      ssd_->MarkAllocated(loc);
      s->ssd.push_back(loc);
      s->checksums.push_back(c.checksum);  // checked against the chunk at its first promotion
      s->committed_checksums.push_back(c.checksum);
    }
    newest = std::max(newest, r.generation);
    s->committed_tokens = r.tokens;
    s->committed_base = r.base;
    s->persisted = true;
    s->last_access_unix_ms = r.last_access_unix_ms;
    MutexLock lock(&mu_);
    s->last_use = ++clock_;
    s->inserted = s->last_use;
    sessions_[SessionMapKey({r.tenant, r.session_id})] = std::move(s);
    ++recovered;
  }
  if (double_claimed > 0) {
    LOG(ERROR) << "session index: " << double_claimed << " records name SSD blocks a newer record names too "
               << "(records of writes that failed, replayed by the index); they are dropped";
  }
  if (!scan.ok()) return scan;
  // A read-only index keeps them (not recovered, so never served) until a later start.
  for (const SessionRecord& r : stale) {
    if (index_->read_only()) break;
    if (absl::Status s = index_->Delete(r.tenant, r.session_id); !s.ok() && !absl::IsNotFound(s)) return s;
  }
  for (const std::string& key : bad_keys) {
    if (index_->read_only()) break;
    if (absl::Status s = index_->DeleteKey(key); !s.ok() && !absl::IsNotFound(s)) return s;
  }
  if (!index_->read_only() && !dropped.empty()) pending_drops_.Clear();  // their records are gone now
  if (unbacked > 0) {
    LOG(ERROR) << "session index: " << unbacked << " records name SSD blocks their data file no longer holds "
               << "(the file is missing or shorter than when they were written); they are dropped";
    MutexLock lock(&mu_);
    stats_.unbacked_records = unbacked;
  }
  {
    MutexLock lock(&mu_);
    last_generation_ = std::max(last_generation_, newest);
  }
  LOG(INFO) << "session index: recovered " << recovered << " persisted sessions, dropped "
            << stale.size() + bad_keys.size() << " stale or unreadable records";
  return absl::OkStatus();
}

bool SessionStoreImpl::RebuildIndexIfLost() {
  // Why the index is taken for lost; "" when it is not.
  std::string why = index_->damage_note();
  bool set_aside = false;  // a damaged index was copied aside when it was opened
  bool quiet = false;      // nothing to say when the data file holds no chunk either
  if (index_->lost_writes() > 0) {
    std::vector<std::string> names;
    for (const LostWrite& w : index_->lost_named()) {
      names.push_back(absl::StrCat(w.tenant, "/", w.session_id, w.deleted ? " (a deletion)" : ""));
    }
    absl::StrAppend(&why, why.empty() ? "" : "; ", "the session index opened without ", index_->lost_writes(),
                    " acknowledged writes (", names.empty() ? "none named" : absl::StrJoin(names, ", "), ")");
    set_aside = index_->damage_note().empty();
  }
  if (why.empty() && index_->Empty() && !ssd_->LocationsFoundAtOpen().empty()) {
    why = index_->created_at_open() ? "the session index was missing while the SSD data file was there"
                                    : "the session index opened empty while the SSD data file held data";
    set_aside = !index_->created_at_open();
    quiet = true;
  }
  const std::string pending = RebuildPendingPath();
  std::error_code ec;
  if (why.empty() && std::filesystem::exists(pending, ec)) {
    // An earlier run could not rebuild the index (no room) and wrote to it since.
    why = absl::StrCat("an earlier run could not rebuild the session index from the SSD data file (",
                       pending, " says so)");
    set_aside = true;
  }
  if (why.empty()) return false;
  // Payloads are verified in host blocks: nothing else uses the host tier yet.
  std::vector<uint32_t> lent;
  std::vector<absl::Span<std::byte>> scratch;
  {
    MutexLock lock(&mu_);
    while (lent.size() < kRebuildReadBlocks && host_->free_blocks() > 0) {
      lent.push_back(*host_->Allocate());
      scratch.push_back(host_->Block(lent.back()));
    }
  }
  IndexRebuildOptions o;
  o.layout = options_.layout;
  o.model_fingerprint = options_.model_fingerprint;
  o.ttl = options_.ttl;
  absl::StatusOr<IndexRebuild> plan = PlanIndexRebuild(*ssd_, o, scratch);
  {
    MutexLock lock(&mu_);
    for (uint32_t b : lent) host_->Free(b);
  }
  if (index_->read_only()) {
    // Nothing can be written: the rebuild waits for a start with room, and the blocks it will
    // take up stay as they are meanwhile (no write-back or probe of this run goes over them;
    // all the data file held, where it could not be scanned).
    if (plan.ok()) {
      for (const SessionRecord& r : plan->records) {
        for (const IndexedChunk& c : r.chunks) ssd_->MarkAllocated({c.file, c.offset});
      }
      for (const SsdLocation& loc : plan->undescribed) ssd_->MarkAllocated(loc);
    } else {
      for (const SsdLocation& loc : ssd_->LocationsFoundAtOpen()) ssd_->MarkAllocated(loc);
    }
    if (quiet && (!plan.ok() || plan->records.empty())) return false;
    MutexLock lock(&mu_);
    rebuild_pending_ = true;
    LOG(ERROR) << why << "; the index cannot be rebuilt from the SSD data file while it is read-only ("
               << index_->read_only_reason() << "), so the sessions it lost are not served until a start with room"
               << (plan.ok() ? absl::StrCat(" (", plan->records.size(), " sessions found)") : "");
    return true;
  }
  if (!plan.ok()) {
    LOG(ERROR) << why << "; rebuilding it from the SSD data file failed (" << plan.status()
               << "), so the sessions it lost are not served";
    return true;
  }
  if (quiet && plan->chunks_found == 0) return false;  // an empty store: nothing was lost
  // What the index as found still says of chunks that cannot say it themselves (format 1).
  std::vector<SessionRecord> surviving;
  absl::Status read = index_->ForEach(
      [&](const SessionRecord& r) {
        if (r.model_fingerprint == options_.model_fingerprint) surviving.push_back(r);
      },
      [](std::string_view, const absl::Status&) {});
  if (!read.ok()) LOG(WARNING) << "cannot read what the session index as found still holds: " << read;
  KeepIndexedUndescribed(surviving, &*plan);
  // The headers no record uses go before anything can reuse their blocks (and before the
  // new index names the rest): a later rebuild must not take them up.
  absl::Status erased = EraseChunkHeaders(*ssd_, plan->erase);
  if (erased.ok()) erased = ssd_->Sync();
  if (!erased.ok()) LOG(WARNING) << "cannot erase the chunk headers the index rebuild does not use: " << erased;
  std::string aside;
  if (absl::Status s = index_->StartOver(plan->records, set_aside, &aside); !s.ok()) {
    LOG(ERROR) << why << "; " << plan->Summary() << ", but the rebuilt index could not be written (" << s
               << "), so the sessions it lost are not served";
    return true;
  }
  if (std::filesystem::remove(pending, ec)) SyncDirectoryOf(pending);
  const std::string line = absl::StrCat(why, "; ", plan->Summary(),
                                        aside.empty() ? "" : absl::StrCat("; the index as found is kept in ", aside));
  if (quiet && plan->records.empty()) {
    LOG(INFO) << line;  // only chunks nothing can use (another model's, say): nothing was lost
  } else {
    LOG(ERROR) << line;
  }
  MutexLock lock(&mu_);
  stats_.index_rebuilt_sessions = static_cast<int64_t>(plan->records.size()) - plan->kept_records;
  stats_.index_rebuild_skipped_sessions = plan->sessions_not_rebuilt;
  last_generation_ = std::max(last_generation_, plan->max_generation);
  return true;
}

std::string SessionStoreImpl::RebuildPendingPath() const { return options_.index_dir + ".rebuild-pending"; }

bool SessionStoreImpl::MarkRebuildPending() {
  return WriteFileDurably(RebuildPendingPath(),
                          "strata: rebuild the session index from the SSD data file at the next start\n",
                          /*append=*/false)
      .ok();
}

}  // namespace strata::storage
