// Who is calling: the tenant of a request, from its API key.
#ifndef STRATA_SERVER_AUTH_H_
#define STRATA_SERVER_AUTH_H_

#include <grpcpp/server_context.h>

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace strata::server {

inline constexpr char kDefaultTenant[] = "default";

// With no keys configured every caller is tenant "default". Otherwise the call must carry
// `authorization: Bearer <key>` with a configured key; Unauthenticated if it does not.
absl::StatusOr<std::string> TenantOf(const grpc::ServerContext& context,
                                     const std::map<std::string, std::string>& api_keys);

}  // namespace strata::server

#endif  // STRATA_SERVER_AUTH_H_
