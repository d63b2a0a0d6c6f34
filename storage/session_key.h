// Names shared by everything that talks about stored sessions: the tiers, a session's key
// and the one map key built from it. A small header so that callers need not include the
// whole store (session_store.h).
#ifndef STRATA_STORAGE_SESSION_KEY_H_
#define STRATA_STORAGE_SESSION_KEY_H_

#include <string>

namespace strata::storage {

// Where a session's KV is held, fastest first. kHbm is the engine's KV pool on the GPU,
// which the engine keeps track of (storage never returns it); host and SSD are storage's.
enum class Tier { kNone = 0, kHbm = 1, kHost = 2, kSsd = 3 };
const char* TierName(Tier tier);  // "none", "hbm", "host", "ssd"

// A session of one tenant; nothing is visible across tenants.
struct SessionKey {
  std::string tenant;
  std::string session_id;
};

// The key under which maps hold a session: tenant and ID joined by '\0'. Tenants cannot
// contain '\0' (they come from the server's configuration), so distinct keys never
// collide.
std::string SessionMapKey(const SessionKey& key);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_KEY_H_
