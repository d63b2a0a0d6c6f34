#include "storage/session_key.h"

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

std::string SessionMapKey(const SessionKey& key) {
  std::string k = key.tenant;
  k.push_back('\0');
  k += key.session_id;
  return k;
}

}  // namespace strata::storage
