#include "storage/session_store.h"

#include "storage/session_store_impl.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "storage/ssd_probe.h"

namespace strata::storage {

absl::Status SessionStoreOptions::Validate() const {
  if (host_capacity_bytes < 0) {
    return absl::InvalidArgumentError("host capacity must not be negative");
  }
  if (!ssd_dirs.empty()) {
    if (ssd_capacity_bytes_per_dir < layout.BlockBytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SSD capacity per directory (", ssd_capacity_bytes_per_dir, " bytes) holds no chunk of ",
          layout.BlockBytes(), " bytes"));
    }
    if (index_dir.empty()) return absl::InvalidArgumentError("an SSD tier needs an index directory");
    // A host tier smaller than one SSD directory is fine; one that cannot hold a single
    // chunk would make every promotion fail.
    if (host_capacity_bytes < layout.BlockBytes()) {
      return absl::InvalidArgumentError("the host tier must hold at least one chunk to use an SSD tier");
    }
  }
  if (ttl <= absl::ZeroDuration()) return absl::InvalidArgumentError("TTL must be positive");
  if (ssd_read_bytes_per_second < 0 || ssd_probe_bytes < 0) {
    return absl::InvalidArgumentError("the SSD read speed and probe size cannot be negative");
  }
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  auto check_quota = [&](const std::string& who, const TenantQuota& q) -> absl::Status {
    for (const auto& [tier, bytes] : {std::pair<const char*, int64_t>{"host", q.host_bytes}, {"SSD", q.ssd_bytes}}) {
      if (bytes < 0 || (bytes > 0 && bytes < layout.BlockBytes())) {
        return absl::InvalidArgumentError(absl::StrCat("the ", tier, " quota of ", who, " (", bytes,
                                                       " bytes) must be 0 (none) or hold a chunk of ",
                                                       layout.BlockBytes(), " bytes"));
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status s = check_quota("every tenant", tenant_quota); !s.ok()) return s;
  for (const auto& [tenant, quota] : tenant_quotas) {
    if (absl::Status s = check_quota(absl::StrCat("tenant '", tenant, "'"), quota); !s.ok()) return s;
  }
  return absl::OkStatus();
}

const TenantQuota& SessionStoreOptions::QuotaOf(const std::string& tenant) const {
  auto it = tenant_quotas.find(tenant);
  return it == tenant_quotas.end() ? tenant_quota : it->second;
}

absl::StatusOr<std::unique_ptr<SessionStore>> SessionStore::Create(
    const SessionStoreOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto host = HostTier::Create(options.host_capacity_bytes, options.layout.BlockBytes(),
                               options.lock_host_memory);
  if (!host.ok()) return host.status();
  std::unique_ptr<SsdTier> ssd;
  std::unique_ptr<SessionIndex> index;
  std::unique_ptr<WriteJournal> journal;
  if (!options.ssd_dirs.empty()) {
    if (!options.power_cut_journal_dir.empty()) {
      auto j = WriteJournal::Open(options.power_cut_journal_dir);
      if (!j.ok()) return j.status();
      journal = *std::move(j);
    }
    SsdTierOptions so;
    so.journal = journal.get();
    so.dirs = options.ssd_dirs;
    so.capacity_bytes_per_dir = options.ssd_capacity_bytes_per_dir;
    so.block_bytes = options.layout.BlockBytes();
    so.queue_depth = options.ssd_queue_depth;
    auto opened = SsdTier::Open(so);
    if (!opened.ok()) return opened.status();
    ssd = *std::move(opened);
    if ((*host)->total_blocks() > 0) {
      absl::Status reg = ssd->RegisterBuffers((*host)->arena_base(), (*host)->arena_bytes());
      if (!reg.ok()) LOG(WARNING) << "SSD I/O will not use registered buffers: " << reg;
    }
    auto idx = SessionIndex::Open(options.index_dir, journal.get());
    if (!idx.ok()) return idx.status();
    index = *std::move(idx);
  }
  auto store = std::make_unique<SessionStoreImpl>(options, *std::move(host), std::move(ssd), std::move(index),
                                                  std::move(journal));
  if (absl::Status s = store->Start(); !s.ok()) return s;
  return store;
}

ChunkLease::ChunkLease(SessionStore* store, std::vector<LeasedChunk> chunks, std::vector<uint32_t> blocks)
    : store_(store), chunks_(std::move(chunks)), blocks_(std::move(blocks)) {
  for (const LeasedChunk& c : chunks_) tokens_ += c.count;
}

ChunkLease::ChunkLease(ChunkLease&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      chunks_(std::move(other.chunks_)),
      blocks_(std::move(other.blocks_)),
      tokens_(std::exchange(other.tokens_, 0)) {
  other.chunks_.clear();
  other.blocks_.clear();
}

ChunkLease& ChunkLease::operator=(ChunkLease&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    chunks_ = std::move(other.chunks_);
    blocks_ = std::move(other.blocks_);
    tokens_ = std::exchange(other.tokens_, 0);
    other.chunks_.clear();
    other.blocks_.clear();
  }
  return *this;
}

void ChunkLease::Release() {
  chunks_.clear();
  tokens_ = 0;
  if (store_ == nullptr) return;
  std::exchange(store_, nullptr)->ReleaseLease(std::move(blocks_));
  blocks_.clear();
}

SessionStoreImpl::SessionStoreImpl(const SessionStoreOptions& options, std::unique_ptr<HostTier> host,
                                   std::unique_ptr<SsdTier> ssd, std::unique_ptr<SessionIndex> index,
                                   std::unique_ptr<WriteJournal> journal)
    : options_(options),
      host_(std::move(host)),
      journal_(std::move(journal)),
      ssd_(std::move(ssd)),
      index_(std::move(index)),
      placement_(options.placement) {
  lease_pins_.assign(static_cast<size_t>(host_->total_blocks()), 0);
}

absl::Status SessionStoreImpl::Start() {
  if (ssd_ == nullptr) return absl::OkStatus();
  if (options_.layout.chunk_tokens > MaxDescribedChunkTokens(0)) {
    LOG(WARNING) << "chunks of " << options_.layout.chunk_tokens << " tokens cannot carry their descriptor (at most "
                 << MaxDescribedChunkTokens(0) << " tokens' IDs fit a chunk's header page): should the session index "
                 << "be lost, it cannot be rebuilt from the SSD data file";
  }
  if (absl::Status s = Recover(); !s.ok()) return s;
  if (index_->read_only()) {
    MutexLock lock(&mu_);
    degraded_ = true;
    next_recovery_try_ = absl::Now();
    LOG(ERROR) << "the session index is read-only (" << index_->read_only_reason()
               << "): caching is host-only; persisted sessions stay readable, and persisting resumes "
                  "by itself once its file system has room";
  }
  double ssd_rate = options_.ssd_read_bytes_per_second;
  if (ssd_rate <= 0 && options_.ssd_probe_bytes > 0) {
    absl::StatusOr<double> probed = MeasureSsdReadBytesPerSecond(*ssd_, options_.ssd_probe_bytes);
    if (probed.ok()) {
      ssd_rate = *probed;
      LOG(INFO) << "SSD tier reads at " << ssd_rate / 1e9 << " GB/s (probe of " << options_.ssd_probe_bytes
                << " bytes)";
    } else {
      LOG(WARNING) << "the SSD tier's read speed could not be probed; the first promotion measures it: "
                   << probed.status();
    }
  }
  {
    MutexLock lock(&mu_);
    ssd_read_bytes_per_second_ = std::max(ssd_rate, 0.0);
  }
  persist_thread_ = std::thread([this] { PersistLoop(); });
  return absl::OkStatus();
}

SessionStoreImpl::~SessionStoreImpl() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    // Promotions finish on the SSD completion thread and touch the sessions; leases hold
    // host blocks until their holders release them.
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return promotions_in_flight_ == 0 && leases_out_ == 0;
    });
  }
  if (persist_thread_.joinable()) persist_thread_.join();
}

void SessionStoreImpl::TouchLocked(Session& s) {
  s.last_use = ++clock_;
  s.last_access_unix_ms = absl::ToUnixMillis(absl::Now());
}

bool SessionStoreImpl::ExpiredLocked(const Session& s) const {
  return absl::FromUnixMillis(s.last_access_unix_ms) + options_.ttl < absl::Now();
}

SessionInfo SessionStoreImpl::InfoLocked(const Session& s) const {
  SessionInfo info;
  info.session_id = s.session_id;
  info.cached_tokens = static_cast<int64_t>(s.tokens.size());
  info.chunks = static_cast<int>(s.checksums.size());
  info.bytes = info.chunks * options_.layout.BlockBytes();
  info.tier = !s.host.empty() ? Tier::kHost : s.persisted ? Tier::kSsd : Tier::kNone;
  info.last_access_unix_ms = s.last_access_unix_ms;
  info.persisted = s.persisted;
  info.base = s.base;
  return info;
}

void SessionStoreImpl::AddHostSampleLocked(bool write, int64_t bytes, absl::Duration d) {
  constexpr size_t kMaxSamples = 8192;
  if (host_samples_.size() >= kMaxSamples) host_samples_.pop_front();
  host_samples_.push_back(TierIoSample{Tier::kHost, write, bytes, absl::ToDoubleSeconds(d)});
}

std::vector<TierIoSample> SessionStoreImpl::TakeIoSamples() {
  std::vector<TierIoSample> out;
  {
    MutexLock lock(&mu_);
    out.assign(host_samples_.begin(), host_samples_.end());
    host_samples_.clear();
  }
  if (ssd_ != nullptr) {
    for (const SsdIoSample& io : ssd_->TakeIoSamples()) {
      out.push_back(TierIoSample{Tier::kSsd, io.write, io.bytes, io.seconds});
    }
  }
  return out;
}

void SessionStoreImpl::EnqueueWriteBackLocked(const std::string& map_key, const Session& s) {
  if (ssd_ == nullptr || degraded_) return;
  PersistJob job;
  job.map_key = map_key;
  job.version = s.version;
  persist_queue_.push_back(std::move(job));
}

void SessionStoreImpl::DropHostLocked(Session& s, size_t keep_chunks) {
  while (s.host.size() > keep_chunks) {
    host_->Free(s.host.back());
    s.host.pop_back();
  }
}

void SessionStoreImpl::RemoveLocked(const std::string& map_key, const char* why) {
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  if (!s.ssd.empty()) {
    ++stats_.persisted_deleted;
    LOG(INFO) << "session '" << s.session_id << "' of tenant '" << s.tenant << "': its persisted copy ("
              << s.committed_tokens.size() << " tokens) is deleted: " << why;
  }
  DropHostLocked(s, 0);
  if (index_ != nullptr) {
    PersistJob job;
    job.drop = true;
    job.tenant = s.tenant;
    job.session_id = s.session_id;
    job.free_after = std::move(s.ssd);
    persist_queue_.push_back(std::move(job));
  }
  sessions_.erase(it);
}

void SessionStoreImpl::DropNewerVersionLocked(const std::string& map_key, const char* why) {
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  if (s.ssd.empty()) {
    RemoveLocked(map_key, why);  // nothing acknowledged to fall back to
    return;
  }
  // Without a newer version in place (Save had only begun to replace the persisted one,
  // which it holds still), only its host copy goes.
  if (!s.persisted) {
    LOG(WARNING) << "session '" << s.session_id << "' of tenant '" << s.tenant << "': its newer version ("
                 << s.tokens.size() << " tokens) is dropped (" << why << "); it falls back to its persisted "
                 << s.committed_tokens.size() << " tokens";
    ++stats_.reverted_to_persisted;
  }
  s.prefetched = false;
  s.dropped_newer = why;
  s.filling = 0;  // a fill still in flight finds the session re-versioned and lets go
  DropHostLocked(s, 0);
  UseCommittedLocked(s);
}

void SessionStoreImpl::UseCommittedLocked(Session& s) {
  s.tokens = s.committed_tokens;
  s.base = s.committed_base;
  s.checksums.assign(s.committed_checksums.begin(), s.committed_checksums.end());
  s.persisted = true;
  s.version = ++versions_;
}

absl::Status SessionStoreImpl::Save(const SessionKey& key, absl::Span<const int32_t> tokens,
                                int64_t keep_tokens, FillFn fill, std::string_view base) {
  MutexLock lock(&mu_);
  return SaveLocked(key, tokens, keep_tokens, fill, base, nullptr);
}

absl::StatusOr<uint64_t> SessionStoreImpl::SaveAsync(const SessionKey& key, absl::Span<const int32_t> tokens,
                                                     int64_t keep_tokens, FillFn fill, std::string_view base) {
  MutexLock lock(&mu_);
  uint64_t ticket = 0;
  if (absl::Status s = SaveLocked(key, tokens, keep_tokens, fill, base, &ticket); !s.ok()) return s;
  return ticket;
}

void SessionStoreImpl::FinishFill(uint64_t ticket, absl::Status filled) {
  MutexLock lock(&mu_);
  auto f = fills_.find(ticket);
  if (f == fills_.end()) return;
  Fill fill = std::move(f->second);
  fills_.erase(f);
  for (uint32_t b : fill.blocks) {
    --lease_pins_[b];
    host_->Free(b);  // the pin's reference; the session's own remains if it still has the block
  }
  --leases_out_;
  auto it = sessions_.find(fill.map_key);
  if (it == sessions_.end() || it->second->filling != ticket) return;  // re-saved or gone meanwhile
  Session& s = *it->second;
  s.filling = 0;
  if (!filled.ok() || s.version != fill.version) {
    LOG(WARNING) << "session '" << s.session_id << "' was not filled (" << filled << ")";
    DropNewerVersionLocked(fill.map_key, "its KV copy failed");
    return;
  }
  EnqueueWriteBackLocked(fill.map_key, s);
}

absl::Status SessionStoreImpl::SaveLocked(const SessionKey& key, absl::Span<const int32_t> tokens,
                                          int64_t keep_tokens, FillFn fill, std::string_view base,
                                          uint64_t* fill_ticket) {
  const ChunkLayout& layout = options_.layout;
  std::string map_key = SessionMapKey(key);
  auto it = sessions_.find(map_key);
  const int64_t stored = it == sessions_.end() ? 0 : static_cast<int64_t>(it->second->tokens.size());
  if (keep_tokens < 0 || keep_tokens > stored || keep_tokens > static_cast<int64_t>(tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat("cannot keep ", keep_tokens,
                                                   " tokens of a session storing ", stored));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError("a session needs at least one token to be stored");
  }
  if (keep_tokens > 0 && it->second->base != base) {
    return absl::InvalidArgumentError("cannot keep tokens of a session that followed another base");
  }
  if (keep_tokens > 0) {
    // The caller decided keep_tokens against the version it matched; the session may have
    // fallen back to an older one since (a newer, unpersisted version pushed out). Only the
    // tokens this version holds too are kept: the rest is filled anew.
    const std::vector<int32_t>& have = it->second->tokens;
    const auto end = have.begin() + keep_tokens;
    keep_tokens = std::mismatch(have.begin(), end, tokens.begin()).first - have.begin();
  }
  auto& slot = sessions_[map_key];
  if (slot == nullptr) {
    slot = std::make_unique<Session>();
    slot->tenant = key.tenant;
    slot->session_id = key.session_id;
    slot->inserted = ++clock_;
    slot->born = ++versions_;
  }
  Session& s = *slot;
  const int64_t total_chunks = (static_cast<int64_t>(tokens.size()) + layout.chunk_tokens - 1) / layout.chunk_tokens;
  // Only whole chunks are kept, and only from a host copy (a session saved right after an
  // SSD read has one); a kept partial chunk is rewritten with its new tokens.
  size_t keep_chunks = std::min(static_cast<size_t>(keep_tokens / layout.chunk_tokens), s.host.size());
  if (s.filling != 0) keep_chunks = 0;  // chunks still being filled are not known to hold anything
  DropHostLocked(s, keep_chunks);
  s.checksums.resize(keep_chunks);
  const int64_t needed = total_chunks - static_cast<int64_t>(keep_chunks);
  bool over_quota = false;
  if (!MakeHostRoomLocked(needed, &s, RoomFor::kHost, &over_quota)) {
    DropNewerVersionLocked(map_key,
                           over_quota ? "it does not fit its tenant's host quota" : "it does not fit the host tier");
    ++stats_.save_rejected;
    if (over_quota) {
      return absl::ResourceExhaustedError(
          absl::StrCat("session of ", tokens.size(), " tokens needs ", total_chunks, " chunks; tenant '", key.tenant,
                       "' may hold ", QuotaBlocks(options_.QuotaOf(key.tenant).host_bytes),
                       " in the host tier (its host quota) and its own sessions cannot make the room"));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "session of ", tokens.size(), " tokens needs ", total_chunks, " chunks; the host tier holds ",
        host_->total_blocks(), " (", host_->free_blocks(), " free)"));
  }
  const absl::Time start = absl::Now();
  for (int64_t c = static_cast<int64_t>(keep_chunks); c < total_chunks; ++c) {
    uint32_t b = *host_->Allocate();  // MakeHostRoomLocked guaranteed the room
    absl::Span<std::byte> block = host_->Block(b);
    int64_t begin = c * layout.chunk_tokens;
    int count = static_cast<int>(std::min<int64_t>(layout.chunk_tokens, static_cast<int64_t>(tokens.size()) - begin));
    absl::Span<std::byte> payload(ChunkPayload(block), static_cast<size_t>(layout.PayloadBytes()));
    // `fill` writes the rows of `count` tokens; a partial chunk's other rows are zeroed by
    // the write-back, before it hashes the payload for the disk (ZeroRowsPast): zeroing
    // them here cost the engine thread 3.4 ms a turn at Llama-3-8B's 43 MB chunks.
    fill(begin, count, payload);
    // Unsealed: the write-back hashes the payload off this thread, and only if it goes to SSD.
    WriteChunkHeader(layout, options_.model_fingerprint, count, block);
    s.host.push_back(b);
    s.checksums.push_back(std::nullopt);
  }
  Fill pending;
  if (fill_ticket != nullptr) {
    // The payloads land later: pinned (as a lease pins) until FinishFill.
    for (size_t c = keep_chunks; c < s.host.size(); ++c) {
      host_->Ref(s.host[c]);
      ++lease_pins_[s.host[c]];
      pending.blocks.push_back(s.host[c]);
    }
    ++leases_out_;
  }
  if (needed > 0) AddHostSampleLocked(true, needed * layout.BlockBytes(), absl::Now() - start);
  s.tokens.assign(tokens.begin(), tokens.end());
  s.base = std::string(base);
  s.dropped_newer = nullptr;
  s.over_ssd_quota = false;
  // The SSD copy (if any) now holds an older version; it stays named by the committed
  // record until the write-back of this version replaces it.
  s.persisted = false;
  s.version = ++versions_;
  TouchLocked(s);
  if (fill_ticket == nullptr) {
    s.filling = 0;
    EnqueueWriteBackLocked(map_key, s);
    return absl::OkStatus();
  }
  *fill_ticket = next_fill_++;
  s.filling = *fill_ticket;
  pending.map_key = map_key;
  pending.version = s.version;
  fills_.emplace(*fill_ticket, std::move(pending));
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> SessionStoreImpl::Get(const SessionKey& key) const {
  MutexLock lock(&mu_);
  auto it = sessions_.find(SessionMapKey(key));
  if (it == sessions_.end() || (it->second->host.empty() && !it->second->persisted)) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  return InfoLocked(*it->second);
}

absl::Status SessionStoreImpl::Drop(const SessionKey& key) {
  MutexLock lock(&mu_);
  std::string map_key = SessionMapKey(key);
  auto it = sessions_.find(map_key);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  RemoveLocked(map_key, "DropSession");
  return absl::OkStatus();
}

std::vector<SessionInfo> SessionStoreImpl::List(const std::string& tenant) const {
  MutexLock lock(&mu_);
  std::vector<SessionInfo> out;
  for (const auto& [k, s] : sessions_) {
    if (s->tenant == tenant && (!s->host.empty() || s->persisted)) out.push_back(InfoLocked(*s));
  }
  std::sort(out.begin(), out.end(),
            [](const SessionInfo& a, const SessionInfo& b) { return a.session_id < b.session_id; });
  return out;
}

SessionStore::IdPrefixTotals SessionStoreImpl::TotalsOfIdPrefix(std::string_view prefix) const {
  MutexLock lock(&mu_);
  IdPrefixTotals t;
  for (const auto& [k, s] : sessions_) {
    if ((s->host.empty() && !s->persisted) || !std::string_view(s->session_id).starts_with(prefix)) continue;
    ++t.sessions;
    t.on_host += !s->host.empty();
    t.persisted += s->persisted;
    t.bytes += static_cast<int64_t>(s->checksums.size()) * options_.layout.BlockBytes();
  }
  return t;
}

SessionStoreStats SessionStoreImpl::Stats() const {
  MutexLock lock(&mu_);
  SessionStoreStats s = stats_;
  s.host_capacity_bytes = host_->capacity_bytes();
  s.host_used_bytes = host_->used_bytes();
  s.sessions = static_cast<int64_t>(sessions_.size());
  for (const auto& [k, session] : sessions_) {
    if (!session->host.empty()) ++s.host_sessions;
    if (session->persisted) ++s.ssd_sessions;
  }
  s.ssd_enabled = ssd_ != nullptr;
  s.ssd_degraded = degraded_;
  // Saves and drops waiting; retiring freed blocks is the queue's own housekeeping.
  s.persist_queue =
      std::count_if(persist_queue_.begin(), persist_queue_.end(), [](const PersistJob& j) { return !j.retire; });
  if (ssd_ != nullptr) {
    s.ssd_capacity_bytes = ssd_->capacity_bytes();
    s.ssd_used_bytes = ssd_->used_bytes();
  }
  return s;
}

}  // namespace strata::storage

namespace strata::storage {

SessionStoreStats SessionStoreImpl::TenantStats(const std::string& tenant) const {
  MutexLock lock(&mu_);
  SessionStoreStats s;
  if (auto it = tenant_stats_.find(tenant); it != tenant_stats_.end()) {
    s.lookups = it->second.lookups;
    s.hits = it->second.hits;
    s.hit_tokens = it->second.hit_tokens;
    s.evictions = it->second.evictions;
    s.quota_evictions_host = it->second.quota_evictions_host;
    s.quota_evictions_ssd = it->second.quota_evictions_ssd;
    s.quota_refused_host = it->second.quota_refused_host;
    s.quota_refused_ssd = it->second.quota_refused_ssd;
  }
  s.host_quota_bytes = options_.QuotaOf(tenant).host_bytes;
  s.ssd_quota_bytes = options_.QuotaOf(tenant).ssd_bytes;
  s.host_capacity_bytes = host_->capacity_bytes();
  const int64_t block = options_.layout.BlockBytes();
  for (const auto& [k, session] : sessions_) {
    if (session->tenant != tenant) continue;
    ++s.sessions;
    if (!session->host.empty()) ++s.host_sessions;
    if (session->persisted) ++s.ssd_sessions;
    s.host_used_bytes += static_cast<int64_t>(session->host.size()) * block;
    s.ssd_used_bytes += static_cast<int64_t>(session->ssd.size()) * block;
  }
  s.ssd_enabled = ssd_ != nullptr;
  s.ssd_degraded = degraded_;
  if (ssd_ != nullptr) s.ssd_capacity_bytes = ssd_->capacity_bytes();
  return s;
}

absl::Span<std::byte> SessionStoreImpl::host_arena() const {
  MutexLock lock(&mu_);
  return absl::Span<std::byte>(host_->arena_base(), static_cast<size_t>(host_->arena_bytes()));
}

}  // namespace strata::storage
