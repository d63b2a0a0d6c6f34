#include "server/auth.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata::server {

absl::StatusOr<std::map<std::string, ApiKey>> ApiKeys::Parse(std::string_view text) {
  std::map<std::string, ApiKey> keys;
  int entry = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    for (absl::string_view item : absl::StrSplit(line, ',', absl::SkipWhitespace())) {
      ++entry;
      item = absl::StripAsciiWhitespace(item);
      const size_t eq = item.find('=');
      if (eq == absl::string_view::npos || eq == 0 || eq + 1 == item.size()) {
        return absl::InvalidArgumentError(absl::StrCat("API key entry ", entry, " is not key=tenant[:admin]"));
      }
      ApiKey key;
      absl::string_view tenant = item.substr(eq + 1);
      if (absl::EndsWith(tenant, ":admin")) {
        key.admin = true;
        tenant.remove_suffix(6);
      }
      if (tenant.empty() || tenant.find_first_of(":= \t") != absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat("API key entry ", entry, " names no valid tenant"));
      }
      key.tenant = std::string(tenant);
      if (!keys.emplace(std::string(item.substr(0, eq)), std::move(key)).second) {
        return absl::InvalidArgumentError(absl::StrCat("API key entry ", entry, " repeats a key"));
      }
    }
  }
  return keys;
}

void ApiKeys::Replace(std::map<std::string, ApiKey> keys) {
  MutexLock lock(&mu_);
  keys_ = std::move(keys);
}

bool ApiKeys::empty() const {
  MutexLock lock(&mu_);
  return keys_.empty();
}

std::vector<std::string> ApiKeys::tenants() const {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [k, v] : keys_) out.push_back(v.tenant);
  return out;
}

absl::StatusOr<Caller> ApiKeys::Authenticate(const grpc::ServerContext& context) const {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  MutexLock lock(&mu_);
  if (keys_.empty()) return Caller{kDefaultTenant, false};
  if (it == md.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <api key>' metadata");
  }
  std::string value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.compare(0, kBearer.size(), kBearer) != 0) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <api key>'");
  }
  auto key = keys_.find(value.substr(kBearer.size()));
  if (key == keys_.end()) return absl::UnauthenticatedError("unknown API key");
  return Caller{key->second.tenant, key->second.admin};
}

absl::StatusOr<std::string> TenantOf(const grpc::ServerContext& context, const ApiKeys& keys) {
  auto caller = keys.Authenticate(context);
  if (!caller.ok()) return caller.status();
  return caller->tenant;
}

}  // namespace strata::server
