// Tenant quotas: how many bytes of each tier one tenant's sessions may hold, so that one
// tenant's flood of sessions never pushes out another's.
//
// A tenant over its host quota makes room among its own sessions only (its least valuable
// first, in the placement policy's order: demoted when they are on SSD, else evicted); when
// its own cannot make the room (the session alone is larger than the quota, or the rest are
// in use), the save or promotion is refused and nothing of any other tenant moves. The SSD
// quota works the same way in the write-back: the tenant's sessions held only on SSD leave
// (their persisted copies deleted, counted and logged as the SSD tier's own capacity
// policy), or the session stays host-only, not persisted. Within its quota a tenant meets
// the tier's global placement when the whole tier is full; quotas whose sum fits each tier
// isolate tenants completely. (SessionStoreOptions holds them; session_room.cc applies
// them.)
#ifndef STRATA_STORAGE_TENANT_QUOTA_H_
#define STRATA_STORAGE_TENANT_QUOTA_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata::storage {

// Bytes of each tier a tenant's sessions may hold; 0: no quota of that tier.
struct TenantQuota {
  int64_t host_bytes = 0;
  int64_t ssd_bytes = 0;
  bool operator==(const TenantQuota&) const = default;
};

// A byte count: digits, optionally followed by KiB, MiB, GiB or TiB ("512MiB"). Returns
// InvalidArgument naming the text otherwise (or when it overflows).
absl::StatusOr<int64_t> ParseByteCount(absl::string_view text);

// Per-tenant quotas from `--tenant_quotas` text: entries `tenant:host=BYTES,ssd=BYTES`
// separated by ';' (spaces around entries ignored), either field optional; a field an entry
// does not name is `defaults`' (so `acme:host=0` lifts acme's host quota and keeps the
// default SSD quota). Returns InvalidArgument naming the bad entry (an empty tenant, a
// tenant twice, an unknown field, a bad byte count).
absl::StatusOr<std::map<std::string, TenantQuota>> ParseTenantQuotas(absl::string_view text,
                                                                     const TenantQuota& defaults);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_TENANT_QUOTA_H_
