#include "server/cache_service.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "engine/system_prompt_names.h"
#include "server/auth.h"
#include "server/status_map.h"

namespace strata::server {
namespace {

void Fill(const storage::SessionInfo& in, v1::SessionInfo* out) {
  out->set_session_id(in.session_id);
  out->set_cached_tokens(static_cast<uint32_t>(in.cached_tokens));
  out->set_bytes(static_cast<uint64_t>(in.bytes));
  out->set_chunks(static_cast<uint32_t>(in.chunks));
  out->set_tier(static_cast<v1::Tier>(in.tier));
  out->set_last_access_unix_ms(in.last_access_unix_ms);
  out->set_persisted(in.persisted);
}

absl::Status CacheOff() { return absl::NotFoundError("the session cache is off (--cache=off)"); }

}  // namespace

absl::StatusOr<std::string> CacheServiceImpl::TenantFor(grpc::ServerContext* context, const std::string& requested,
                                                        bool* admin) const {
  auto caller = api_keys_->Authenticate(*context);
  if (!caller.ok()) return caller.status();
  const bool is_admin = caller->admin || (!admin_tenant_.empty() && caller->tenant == admin_tenant_);
  if (admin != nullptr) *admin = is_admin;
  if (requested.empty() || requested == caller->tenant) return caller->tenant;
  if (!is_admin) {
    return absl::PermissionDeniedError("only an admin key may act on another tenant's sessions");
  }
  return requested;
}

absl::StatusOr<storage::SessionKey> CacheServiceImpl::KeyFor(grpc::ServerContext* context,
                                                             const std::string& session_id,
                                                             const std::string& requested_tenant) const {
  auto tenant = TenantFor(context, requested_tenant);
  if (!tenant.ok()) return tenant.status();
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  return storage::SessionKey{*tenant, session_id};
}

grpc::Status CacheServiceImpl::GetSession(grpc::ServerContext* context,
                                          const v1::GetSessionRequest* request,
                                          v1::SessionInfo* response) {
  auto key = KeyFor(context, request->session_id(), request->tenant());
  if (!key.ok()) return ToGrpcStatus(key.status());
  if (store_ == nullptr) return ToGrpcStatus(CacheOff());
  auto info = store_->Get(*key);
  if (!info.ok()) return ToGrpcStatus(info.status());
  Fill(*info, response);
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::DropSession(grpc::ServerContext* context,
                                           const v1::DropSessionRequest* request,
                                           v1::DropSessionResponse*) {
  auto key = KeyFor(context, request->session_id(), request->tenant());
  if (!key.ok()) return ToGrpcStatus(key.status());
  if (store_ == nullptr) return ToGrpcStatus(CacheOff());
  return ToGrpcStatus(store_->Drop(*key));
}

grpc::Status CacheServiceImpl::ListSessions(grpc::ServerContext* context,
                                            const v1::ListSessionsRequest* request,
                                            v1::ListSessionsResponse* response) {
  auto tenant = TenantFor(context, request->tenant());
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (store_ != nullptr) {
    for (const storage::SessionInfo& info : store_->List(*tenant)) {
      // The KV of shared system prompts is the SystemPromptService's to list.
      if (engine::SystemPromptIdOfSession(info.session_id).has_value()) continue;
      Fill(info, response->add_sessions());
    }
  }
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::Prefetch(grpc::ServerContext* context,
                                        const v1::PrefetchRequest* request,
                                        v1::PrefetchResponse* response) {
  auto tenant = TenantOf(*context, *api_keys_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  for (const std::string& id : request->session_ids()) {
    if (absl::Status s = ValidateSessionId(id); !s.ok()) return ToGrpcStatus(s);
  }
  // The sessions join the placement look-ahead after the engine's queue: those held only
  // on SSD come up to host memory in the background as room allows (never at a queued
  // session's expense); the answer does not wait. `accepted` counts the stored ones.
  uint32_t accepted = 0;
  if (store_ != nullptr) {
    for (const std::string& id : request->session_ids()) {
      if (store_->Hint(storage::SessionKey{*tenant, id})) ++accepted;
    }
  }
  response->set_accepted(accepted);
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                                     v1::StatsResponse* response) {
  bool admin = false;
  auto tenant = TenantFor(context, request->tenant(), &admin);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  response->set_model_fingerprint(absl::StrFormat("%016x", fingerprint_));
  if (store_ != nullptr) {
    const bool everything = admin && request->tenant().empty();
    storage::SessionStoreStats s = everything ? store_->Stats() : store_->TenantStats(*tenant);
    v1::TierStats* host = response->add_tiers();
    host->set_tier(v1::TIER_HOST);
    host->set_capacity_bytes(static_cast<uint64_t>(s.host_capacity_bytes));
    host->set_used_bytes(static_cast<uint64_t>(s.host_used_bytes));
    host->set_sessions(static_cast<uint32_t>(s.host_sessions));
    host->set_quota_bytes(static_cast<uint64_t>(s.host_quota_bytes));
    if (s.ssd_enabled) {
      v1::TierStats* ssd = response->add_tiers();
      ssd->set_tier(v1::TIER_SSD);
      ssd->set_capacity_bytes(static_cast<uint64_t>(s.ssd_capacity_bytes));
      ssd->set_used_bytes(static_cast<uint64_t>(s.ssd_used_bytes));
      ssd->set_sessions(static_cast<uint32_t>(s.ssd_sessions));
      ssd->set_quota_bytes(static_cast<uint64_t>(s.ssd_quota_bytes));
    }
    response->set_ssd_degraded(s.ssd_degraded);
    response->set_lookups(static_cast<uint64_t>(s.lookups));
    response->set_hits(static_cast<uint64_t>(s.hits));
    response->set_reused_tokens(static_cast<uint64_t>(s.hit_tokens));
    response->set_evictions(static_cast<uint64_t>(s.evictions));
    response->set_quota_evictions(static_cast<uint64_t>(s.quota_evictions_host + s.quota_evictions_ssd));
    response->set_quota_refused(static_cast<uint64_t>(s.quota_refused_host + s.quota_refused_ssd));
  }
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::Flush(grpc::ServerContext* context, const v1::FlushRequest* request,
                                     v1::FlushResponse*) {
  auto tenant = TenantOf(*context, *api_keys_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  for (const std::string& id : request->session_ids()) {
    if (absl::Status s = ValidateSessionId(id); !s.ok()) return ToGrpcStatus(s);
  }
  // Nothing can be persisted: no working SSD tier, as cache.proto says for Flush.
  if (store_ == nullptr) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the session cache is off (--cache=off)");
  const absl::Duration timeout =
      request->timeout_ms() == 0 ? absl::Seconds(30) : absl::Milliseconds(request->timeout_ms());
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& id : request->session_ids()) {
    absl::Status s = store_->Flush(storage::SessionKey{*tenant, id}, deadline - absl::Now());
    if (!s.ok()) return ToGrpcStatus(s);
  }
  return grpc::Status::OK;
}

}  // namespace strata::server
