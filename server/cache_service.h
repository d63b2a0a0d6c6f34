// CacheService: what the session cache holds, per tenant, and hints about what comes next.
#ifndef STRATA_SERVER_CACHE_SERVICE_H_
#define STRATA_SERVER_CACHE_SERVICE_H_

#include "proto/request_traits.h"  // before the generated service: strict request parsing

#include <map>
#include <string>

#include "server/auth.h"
#include "server/chat_service.h"
#include "storage/session_store.h"
#include "strata/v1/cache.grpc.pb.h"

namespace strata::server {

class CacheServiceImpl final : public v1::CacheService::Service {
 public:
  // `store` is null when the cache is off: every session is then NOT_FOUND.
  CacheServiceImpl(storage::SessionStore* store, uint64_t model_fingerprint,
                   const ApiKeys* api_keys, std::string admin_tenant = "")
      : store_(store), fingerprint_(model_fingerprint), api_keys_(api_keys), admin_tenant_(std::move(admin_tenant)) {}

  grpc::Status GetSession(grpc::ServerContext* context, const v1::GetSessionRequest* request,
                          v1::SessionInfo* response) override;
  grpc::Status DropSession(grpc::ServerContext* context, const v1::DropSessionRequest* request,
                           v1::DropSessionResponse* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context, const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status Prefetch(grpc::ServerContext* context, const v1::PrefetchRequest* request,
                        v1::PrefetchResponse* response) override;
  // The caller's tenant only (its lookups, hits, sessions and bytes); the admin tenant
  // sees the whole store.
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;
  grpc::Status Flush(grpc::ServerContext* context, const v1::FlushRequest* request,
                     v1::FlushResponse* response) override;

 private:
  // The tenant a call acts on: `requested` (another tenant's, for admin keys only:
  // PermissionDenied otherwise) or the caller's own when empty.
  absl::StatusOr<std::string> TenantFor(grpc::ServerContext* context, const std::string& requested,
                                        bool* admin = nullptr) const;
  absl::StatusOr<storage::SessionKey> KeyFor(grpc::ServerContext* context, const std::string& session_id,
                                             const std::string& requested_tenant) const;

  storage::SessionStore* store_;
  uint64_t fingerprint_;
  const ApiKeys* api_keys_;
  const std::string admin_tenant_;  // Stats of every tenant; empty: none
};

}  // namespace strata::server

#endif  // STRATA_SERVER_CACHE_SERVICE_H_
