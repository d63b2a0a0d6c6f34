#include "server/auth.h"

namespace strata::server {

absl::StatusOr<std::string> TenantOf(const grpc::ServerContext& context,
                                     const std::map<std::string, std::string>& api_keys) {
  if (api_keys.empty()) return std::string(kDefaultTenant);
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <api key>' metadata");
  }
  std::string value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.compare(0, kBearer.size(), kBearer) != 0) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <api key>'");
  }
  auto key = api_keys.find(value.substr(kBearer.size()));
  if (key == api_keys.end()) return absl::UnauthenticatedError("unknown API key");
  return key->second;
}

}  // namespace strata::server
