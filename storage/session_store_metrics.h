// The session store's Prometheus metrics: tier occupancy and capacity, sessions by tier,
// evictions, prefetches, promotions, bytes moved, persistence, SSD faults, tenant quotas,
// tier I/O latency. Registered by the store's owner; values are read from SessionStore::Stats()
// when /metrics is scraped.
#ifndef STRATA_STORAGE_SESSION_STORE_METRICS_H_
#define STRATA_STORAGE_SESSION_STORE_METRICS_H_

#include <functional>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "storage/session_store.h"

namespace strata::storage {

// Registers the store's metrics in `registry` and a collector that fills them from
// `store` (null: the cache is off; every gauge reads 0) at each scrape. `store` must
// outlive the registry's collections. `cache_enabled` sets strata_cache_enabled.
//
// With `tenants` (serve --metrics_tenant_label), also one series per tenant it returns at
// each scrape (the API keys' tenants: a bounded set, never a client's choice) of the bytes
// the tenant holds in each tier, its quotas, and its quota evictions and refusals:
//   strata_tenant_cache_bytes{tenant, tier}                  host, ssd
//   strata_tenant_cache_quota_bytes{tenant, tier}            0: no quota
//   strata_tenant_cache_quota_evictions_total{tenant, tier}
//   strata_tenant_cache_quota_refused_total{tenant, tier}
// Without it there are no per-tenant series.
using TenantsFn = std::function<std::vector<std::string>()>;
void ExportSessionStoreMetrics(metrics::Registry& registry, SessionStore* store, bool cache_enabled,
                               TenantsFn tenants = nullptr);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_STORE_METRICS_H_
