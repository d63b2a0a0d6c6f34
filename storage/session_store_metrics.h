// The session store's Prometheus metrics: tier occupancy and capacity, sessions by tier,
// evictions, prefetches, promotions, bytes moved, persistence, SSD faults, tier I/O
// latency. Registered by the store's owner; values are read from SessionStore::Stats()
// when /metrics is scraped.
#ifndef STRATA_STORAGE_SESSION_STORE_METRICS_H_
#define STRATA_STORAGE_SESSION_STORE_METRICS_H_

#include "base/metrics.h"
#include "storage/session_store.h"

namespace strata::storage {

// Registers the store's metrics in `registry` and a collector that fills them from
// `store` (null: the cache is off; every gauge reads 0) at each scrape. `store` must
// outlive the registry's collections. `cache_enabled` sets strata_cache_enabled.
void ExportSessionStoreMetrics(metrics::Registry& registry, SessionStore* store, bool cache_enabled);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SESSION_STORE_METRICS_H_
