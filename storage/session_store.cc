#include "storage/session_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace strata::storage {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kNone: return "none";
    case Tier::kHbm: return "hbm";
    case Tier::kHost: return "host";
    case Tier::kSsd: return "ssd";
  }
  return "unknown";
}

absl::Status SessionStoreOptions::Validate() const {
  if (host_capacity_bytes < 0) {
    return absl::InvalidArgumentError("host capacity must not be negative");
  }
  return layout.Validate();
}

absl::StatusOr<std::unique_ptr<SessionStore>> SessionStore::Create(
    const SessionStoreOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto host = HostTier::Create(options.host_capacity_bytes, options.layout.BlockBytes());
  if (!host.ok()) return host.status();
  return std::unique_ptr<SessionStore>(new SessionStore(options, *std::move(host)));
}

SessionStore::SessionStore(const SessionStoreOptions& options, std::unique_ptr<HostTier> host)
    : options_(options), host_(std::move(host)) {}

std::string SessionStore::MapKey(const SessionKey& key) {
  // Tenants cannot contain '\0' (they come from the server's configuration), so this
  // separates (tenant, id) pairs unambiguously.
  std::string k = key.tenant;
  k.push_back('\0');
  k += key.session_id;
  return k;
}

void SessionStore::TouchLocked(Session& s) {
  s.last_use = ++clock_;
  s.last_access_unix_ms = absl::ToUnixMillis(absl::Now());
}

SessionInfo SessionStore::InfoLocked(const Session& s) const {
  SessionInfo info;
  info.session_id = s.session_id;
  info.cached_tokens = static_cast<int64_t>(s.tokens.size());
  info.chunks = static_cast<int>(s.blocks.size());
  info.bytes = info.chunks * host_->block_bytes();
  info.tier = s.blocks.empty() ? Tier::kNone : Tier::kHost;
  info.last_access_unix_ms = s.last_access_unix_ms;
  return info;
}

PrefixMatch SessionStore::Match(const SessionKey& key, absl::Span<const int32_t> tokens,
                                int64_t max_tokens) {
  MutexLock lock(&mu_);
  ++stats_.lookups;
  auto it = sessions_.find(MapKey(key));
  if (it == sessions_.end()) return {};
  Session& s = *it->second;
  TouchLocked(s);
  int64_t limit = std::min<int64_t>({static_cast<int64_t>(tokens.size()),
                                     static_cast<int64_t>(s.tokens.size()), max_tokens});
  int64_t n = 0;
  while (n < limit && s.tokens[n] == tokens[n]) ++n;
  if (n == 0) return {};
  ++stats_.hits;
  stats_.hit_tokens += n;
  return {n, Tier::kHost};
}

absl::StatusOr<int64_t> SessionStore::Read(const SessionKey& key, int64_t tokens,
                                           VisitFn visit) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(MapKey(key));
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  Session& s = *it->second;
  tokens = std::min<int64_t>(tokens, static_cast<int64_t>(s.tokens.size()));
  const int chunk_tokens = options_.layout.chunk_tokens;
  int64_t delivered = 0;
  for (size_t c = 0; c < s.blocks.size() && delivered < tokens; ++c) {
    absl::Span<std::byte> block = host_->Block(s.blocks[c]);
    int held = 0;
    absl::Status ok = VerifyChunk(options_.layout, options_.model_fingerprint, block, &held);
    int64_t begin = static_cast<int64_t>(c) * chunk_tokens;
    int64_t expected = std::min<int64_t>(chunk_tokens, static_cast<int64_t>(s.tokens.size()) - begin);
    if (ok.ok() && held != expected) ok = absl::DataLossError("chunk token count mismatch");
    if (!ok.ok()) {
      ++stats_.corrupt_chunks;
      FreeBlocksLocked(s, c);
      s.tokens.resize(static_cast<size_t>(begin));
      break;
    }
    int count = static_cast<int>(std::min<int64_t>(held, tokens - delivered));
    visit(begin, count, absl::Span<const std::byte>(ChunkPayload(block), options_.layout.PayloadBytes()));
    delivered += count;
  }
  return delivered;
}

void SessionStore::FreeBlocksLocked(Session& s, size_t keep_chunks) {
  while (s.blocks.size() > keep_chunks) {
    host_->Free(s.blocks.back());
    s.blocks.pop_back();
  }
}

bool SessionStore::MakeRoomLocked(int64_t blocks, const Session* keep) {
  while (host_->free_blocks() < blocks) {
    Session* victim = nullptr;
    std::string victim_key;
    for (auto& [k, s] : sessions_) {
      if (s.get() == keep || s->blocks.empty()) continue;
      if (victim == nullptr || s->last_use < victim->last_use) {
        victim = s.get();
        victim_key = k;
      }
    }
    if (victim == nullptr) return false;
    FreeBlocksLocked(*victim, 0);
    sessions_.erase(victim_key);
    ++stats_.evictions;
  }
  return true;
}

absl::Status SessionStore::Save(const SessionKey& key, absl::Span<const int32_t> tokens,
                                int64_t keep_tokens, FillFn fill) {
  const ChunkLayout& layout = options_.layout;
  MutexLock lock(&mu_);
  std::string map_key = MapKey(key);
  auto it = sessions_.find(map_key);
  const int64_t stored = it == sessions_.end() ? 0 : static_cast<int64_t>(it->second->tokens.size());
  if (keep_tokens < 0 || keep_tokens > stored || keep_tokens > static_cast<int64_t>(tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat("cannot keep ", keep_tokens,
                                                   " tokens of a session storing ", stored));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError("a session needs at least one token to be stored");
  }
  auto& slot = sessions_[map_key];
  if (slot == nullptr) {
    slot = std::make_unique<Session>();
    slot->tenant = key.tenant;
    slot->session_id = key.session_id;
  }
  Session& s = *slot;
  const int64_t total_chunks = (static_cast<int64_t>(tokens.size()) + layout.chunk_tokens - 1) / layout.chunk_tokens;
  // Only whole chunks are kept; a kept partial chunk is rewritten with its new tokens.
  const size_t keep_chunks = static_cast<size_t>(keep_tokens / layout.chunk_tokens);
  FreeBlocksLocked(s, keep_chunks);
  const int64_t needed = total_chunks - static_cast<int64_t>(keep_chunks);
  if (!MakeRoomLocked(needed, &s)) {
    FreeBlocksLocked(s, 0);
    sessions_.erase(map_key);
    ++stats_.save_rejected;
    return absl::ResourceExhaustedError(absl::StrCat(
        "session of ", tokens.size(), " tokens needs ", total_chunks, " chunks; the host tier holds ",
        host_->total_blocks()));
  }
  for (int64_t c = static_cast<int64_t>(keep_chunks); c < total_chunks; ++c) {
    uint32_t b = *host_->Allocate();  // MakeRoomLocked guaranteed the room
    absl::Span<std::byte> block = host_->Block(b);
    int64_t begin = c * layout.chunk_tokens;
    int count = static_cast<int>(std::min<int64_t>(layout.chunk_tokens, static_cast<int64_t>(tokens.size()) - begin));
    absl::Span<std::byte> payload(ChunkPayload(block), static_cast<size_t>(layout.PayloadBytes()));
    std::memset(payload.data(), 0, payload.size());
    fill(begin, count, payload);
    SealChunk(layout, options_.model_fingerprint, count, block);
    s.blocks.push_back(b);
  }
  s.tokens.assign(tokens.begin(), tokens.end());
  TouchLocked(s);
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> SessionStore::Get(const SessionKey& key) const {
  MutexLock lock(&mu_);
  auto it = sessions_.find(MapKey(key));
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  return InfoLocked(*it->second);
}

absl::Status SessionStore::Drop(const SessionKey& key) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(MapKey(key));
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", key.session_id, "' is not stored"));
  }
  FreeBlocksLocked(*it->second, 0);
  sessions_.erase(it);
  return absl::OkStatus();
}

std::vector<SessionInfo> SessionStore::List(const std::string& tenant) const {
  MutexLock lock(&mu_);
  std::vector<SessionInfo> out;
  for (const auto& [k, s] : sessions_) {
    if (s->tenant == tenant) out.push_back(InfoLocked(*s));
  }
  std::sort(out.begin(), out.end(),
            [](const SessionInfo& a, const SessionInfo& b) { return a.session_id < b.session_id; });
  return out;
}

SessionStoreStats SessionStore::Stats() const {
  MutexLock lock(&mu_);
  SessionStoreStats s = stats_;
  s.host_capacity_bytes = host_->capacity_bytes();
  s.host_used_bytes = host_->used_bytes();
  s.sessions = static_cast<int64_t>(sessions_.size());
  return s;
}

}  // namespace strata::storage
