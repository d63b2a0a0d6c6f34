// Who is calling: the tenant of a request, from its API key, and whether the key may act
// across tenants (an admin key).
//
// Keys come from `--api_keys` (visible in `ps`: prefer the others), `--api_keys_file` or
// the STRATA_API_KEYS environment variable, in one format: entries `key=tenant` or
// `key=tenant:admin`, separated by commas or newlines; in a file, `#` starts a comment
// line. SIGHUP reloads the file (ApiKeys::Replace): the keys change for the calls that
// start after it. Keys never appear in logs or errors.
#ifndef STRATA_SERVER_AUTH_H_
#define STRATA_SERVER_AUTH_H_

#include <grpcpp/server_context.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"

namespace strata::server {

inline constexpr char kDefaultTenant[] = "default";

struct ApiKey {
  std::string tenant;
  bool admin = false;  // may call cache-admin methods for other tenants
  bool operator==(const ApiKey&) const = default;
};

struct Caller {
  std::string tenant;
  bool admin = false;
};

// Thread-safe.
class ApiKeys {
 public:
  ApiKeys() = default;
  explicit ApiKeys(std::map<std::string, ApiKey> keys) : keys_(std::move(keys)) {}

  // The format above. InvalidArgument naming the entry by position (never the key).
  static absl::StatusOr<std::map<std::string, ApiKey>> Parse(std::string_view text);

  void Replace(std::map<std::string, ApiKey> keys);
  bool empty() const;
  std::vector<std::string> tenants() const;

  // With no keys every caller is tenant "default" (not admin). Otherwise the call must
  // carry `authorization: Bearer <key>` with a known key; Unauthenticated if it does not.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContext& context) const;

 private:
  mutable Mutex mu_;
  std::map<std::string, ApiKey> keys_ ABSL_GUARDED_BY(mu_);
};

// The caller's tenant (Authenticate's).
absl::StatusOr<std::string> TenantOf(const grpc::ServerContext& context, const ApiKeys& keys);

}  // namespace strata::server

#endif  // STRATA_SERVER_AUTH_H_
