#include "storage/session_store_metrics.h"

namespace strata::storage {

namespace {

void Sync(metrics::Counter& c, int64_t total) { metrics::SyncCounter(c, static_cast<double>(total)); }

// Tenant quotas: the quota reasons of strata_cache_evictions_total, the store-wide quota
// counters, and with `tenants` the per-tenant series (see the header), filled at each
// scrape from Stats and TenantStats.
void ExportQuotaMetrics(metrics::Registry& r, SessionStore* store, TenantsFn tenants) {
  auto& evictions = r.AddCounter("strata_cache_evictions_total", "");  // registered by the caller
  auto& quota_evictions = r.AddCounter("strata_cache_quota_evictions_total",
                                       "Copies taken to keep a tenant within its quota of a tier, from its own "
                                       "sessions: host copies demoted or evicted, SSD copies deleted.");
  auto& quota_refused = r.AddCounter("strata_cache_quota_refused_total",
                                     "Saves or promotions (host) and write-backs (ssd) refused because the tenant's "
                                     "own sessions could not make room within its quota of the tier.");
  r.AddCollector([=, &evictions, &quota_evictions, &quota_refused] {
    SessionStoreStats s;
    if (store != nullptr) s = store->Stats();
    Sync(evictions.WithLabels({{"reason", "host_quota"}}), s.evictions_host_quota);
    Sync(evictions.WithLabels({{"reason", "ssd_quota"}}), s.evictions_ssd_quota);
    Sync(quota_evictions.WithLabels({{"tier", "host"}}), s.quota_evictions_host);
    Sync(quota_evictions.WithLabels({{"tier", "ssd"}}), s.quota_evictions_ssd);
    Sync(quota_refused.WithLabels({{"tier", "host"}}), s.quota_refused_host);
    Sync(quota_refused.WithLabels({{"tier", "ssd"}}), s.quota_refused_ssd);
  });
  if (tenants == nullptr) return;
  auto& bytes = r.AddGauge("strata_tenant_cache_bytes", "Bytes each tenant's sessions hold in each tier.");
  auto& quota = r.AddGauge("strata_tenant_cache_quota_bytes", "Each tenant's quota of each tier (0: none).");
  auto& tenant_evictions = r.AddCounter("strata_tenant_cache_quota_evictions_total",
                                        "Copies taken from each tenant's own sessions to keep it within its quota.");
  auto& tenant_refused =
      r.AddCounter("strata_tenant_cache_quota_refused_total",
                   "Each tenant's saves, promotions (host) and write-backs (ssd) refused for its quota.");
  r.AddCollector([=, &bytes, &quota, &tenant_evictions, &tenant_refused] {
    if (store == nullptr) return;
    for (const std::string& tenant : tenants()) {
      const SessionStoreStats s = store->TenantStats(tenant);
      const metrics::Labels host{{"tenant", tenant}, {"tier", "host"}};
      const metrics::Labels ssd{{"tenant", tenant}, {"tier", "ssd"}};
      bytes.WithLabels(host).Set(static_cast<double>(s.host_used_bytes));
      bytes.WithLabels(ssd).Set(static_cast<double>(s.ssd_used_bytes));
      quota.WithLabels(host).Set(static_cast<double>(s.host_quota_bytes));
      quota.WithLabels(ssd).Set(static_cast<double>(s.ssd_quota_bytes));
      Sync(tenant_evictions.WithLabels(host), s.quota_evictions_host);
      Sync(tenant_evictions.WithLabels(ssd), s.quota_evictions_ssd);
      Sync(tenant_refused.WithLabels(host), s.quota_refused_host);
      Sync(tenant_refused.WithLabels(ssd), s.quota_refused_ssd);
    }
  });
}

}  // namespace

// Mirrors the session store's own statistics into gauges and counters at scrape time.
void ExportSessionStoreMetrics(metrics::Registry& r, SessionStore* store, bool cache_enabled, TenantsFn tenants) {
  auto& tier_bytes = r.AddGauge("strata_tier_bytes", "Bytes held in each tier.");
  auto& tier_capacity = r.AddGauge("strata_tier_capacity_bytes", "Capacity of each tier (0: off).");
  auto& sessions = r.AddGauge("strata_sessions", "Sessions with KV held in each tier.");
  auto& evictions = r.AddCounter("strata_cache_evictions_total",
                                 "Sessions that left the store for room, by reason (host_full: not yet on SSD; "
                                 "ssd_full: held only on SSD; host_quota, ssd_quota: the same, for their "
                                 "tenant's quota).");
  ExportQuotaMetrics(r, store, std::move(tenants));
  auto& prefetches = r.AddCounter("strata_prefetches_total",
                                  "Look-ahead prefetches (SSD to host) by outcome: started, in_time (on host when "
                                  "the turn came), late (the turn waited for it), wasted (left host unused).");
  auto& lookahead = r.AddGauge("strata_lookahead_sessions",
                               "Sessions in the placement look-ahead (queued turns and gateway hints).");
  auto& persist_queue = r.AddGauge("strata_persist_queue_sessions",
                                   "Write-backs waiting for the SSD tier (saved sessions not yet persisted).");
  auto& demotions = r.AddCounter("strata_cache_demotions_total",
                                 "Host copies dropped under pressure (the session stays on SSD).");
  auto& promotions = r.AddCounter("strata_cache_promotions_total",
                                  "Sessions read back from SSD into host memory, by outcome.");
  auto& moved = r.AddCounter("strata_bytes_moved_total", "Bytes moved between tiers, by direction.");
  auto& persisted = r.AddCounter("strata_cache_persisted_total",
                                 "Write-backs that made a session durable (chunks synced, index committed).");
  auto& ssd_errors = r.AddCounter("strata_ssd_write_errors_total", "SSD write, sync or index failures.");
  auto& degraded = r.AddGauge("strata_ssd_degraded", "1 when the SSD tier failed and caching is host-only.");
  auto& rejected = r.AddCounter("strata_cache_save_rejected_total",
                                "Sessions too large for the tier, not stored.");
  auto& corrupt = r.AddCounter("strata_cache_corrupt_chunks_total",
                               "Chunks that failed their checksum or fingerprint (served as misses).");
  auto& expired = r.AddCounter("strata_cache_expired_total", "Sessions dropped by TTL.");
  auto& reverted = r.AddCounter("strata_cache_reverted_to_persisted_total",
                                "Newer unpersisted versions dropped (no host room, a failed copy) whose "
                                "session kept its persisted version.");
  auto& index_damaged = r.AddGauge(
      "strata_index_damaged_at_start",
      "1 when the session index was found damaged at start (repaired, replayed past the damage or reset; "
      "the log says which, and where the damaged copy was kept).");
  auto& lost_writes = r.AddGauge(
      "strata_index_lost_writes_at_start",
      "Acknowledged session index writes missing when the index was opened at start (its log cut short at "
      "its end, or lost with damage); the log names the sessions.");
  auto& rebuilt = r.AddGauge(
      "strata_index_rebuilt_sessions_at_start",
      "Sessions rebuilt at start from the SSD data file's chunk headers because the session index was damaged, "
      "behind its acknowledged writes, or missing or empty while the data file held chunks (0: no rebuild); the "
      "log says what was rebuilt and what was not.");
  auto& rebuild_skipped = r.AddGauge(
      "strata_index_rebuild_skipped_sessions_at_start",
      "Sessions found in the SSD data file by that rebuild with no complete, verified version (not rebuilt).");
  auto& unbacked = r.AddGauge("strata_index_unbacked_records_at_start",
                              "Index records dropped at start because the SSD data file (missing or cut short) "
                              "cannot back them.");
  auto& persisted_deleted = r.AddCounter(
      "strata_cache_persisted_deleted_total",
      "Persisted session versions deleted (DropSession, TTL, corruption, the SSD tier's capacity).");
  auto& io_seconds = r.AddHistogram(
      "strata_tier_io_seconds",
      "Latency of tier I/O: host = a session's chunk copies in or out of the arena, ssd = one "
      "chunk request from submission to completion.",
      {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1});
  auto& enabled = r.AddGauge("strata_cache_enabled", "1 when the session cache is on.");
  enabled.WithLabels({}).Set(cache_enabled ? 1 : 0);
  auto sync = [](metrics::Counter& c, int64_t total) {
    double delta = static_cast<double>(total) - c.Value();
    if (delta > 0) c.Increment(delta);
  };
  r.AddCollector([=, &tier_bytes, &tier_capacity, &sessions, &evictions, &prefetches, &lookahead, &persist_queue,
                  &demotions, &promotions, &moved, &persisted, &ssd_errors, &degraded, &rejected, &corrupt, &expired,
                  &reverted, &persisted_deleted, &index_damaged, &lost_writes, &rebuilt, &rebuild_skipped, &unbacked,
                  &io_seconds] {
    SessionStoreStats s;
    if (store != nullptr) {
      s = store->Stats();
      for (const TierIoSample& io : store->TakeIoSamples()) {
        io_seconds.WithLabels({{"tier", TierName(io.tier)}, {"op", io.write ? "write" : "read"}})
            .Observe(io.seconds);
      }
    }
    // The hbm series are the engine's (engine/hbm_tier.h).
    tier_bytes.WithLabels({{"tier", "host"}}).Set(static_cast<double>(s.host_used_bytes));
    tier_capacity.WithLabels({{"tier", "host"}}).Set(static_cast<double>(s.host_capacity_bytes));
    sessions.WithLabels({{"tier", "host"}}).Set(static_cast<double>(s.host_sessions));
    tier_bytes.WithLabels({{"tier", "ssd"}}).Set(static_cast<double>(s.ssd_used_bytes));
    tier_capacity.WithLabels({{"tier", "ssd"}}).Set(static_cast<double>(s.ssd_capacity_bytes));
    sessions.WithLabels({{"tier", "ssd"}}).Set(static_cast<double>(s.ssd_sessions));
    sync(evictions.WithLabels({{"reason", "host_full"}}), s.evictions_host_full);
    sync(evictions.WithLabels({{"reason", "ssd_full"}}), s.evictions_ssd_full);
    sync(prefetches.WithLabels({{"outcome", "started"}}), s.prefetches);
    sync(prefetches.WithLabels({{"outcome", "in_time"}}), s.prefetch_in_time);
    sync(prefetches.WithLabels({{"outcome", "late"}}), s.prefetch_late);
    sync(prefetches.WithLabels({{"outcome", "wasted"}}), s.prefetch_wasted);
    lookahead.WithLabels({}).Set(static_cast<double>(s.lookahead_sessions));
    persist_queue.WithLabels({}).Set(static_cast<double>(s.persist_queue));
    sync(demotions.WithLabels({}), s.demotions);
    sync(promotions.WithLabels({{"outcome", "ok"}}), s.promotions);
    sync(promotions.WithLabels({{"outcome", "failed"}}), s.promotion_failures);
    sync(moved.WithLabels({{"direction", "host_to_ssd"}}), s.ssd_bytes_written);
    sync(moved.WithLabels({{"direction", "ssd_to_host"}}), s.ssd_bytes_read);
    sync(persisted.WithLabels({}), s.persisted_saves);
    sync(ssd_errors.WithLabels({}), s.ssd_write_errors);
    degraded.WithLabels({}).Set(s.ssd_degraded ? 1 : 0);
    sync(rejected.WithLabels({}), s.save_rejected);
    sync(corrupt.WithLabels({}), s.corrupt_chunks);
    sync(expired.WithLabels({}), s.expired);
    sync(reverted.WithLabels({}), s.reverted_to_persisted);
    sync(persisted_deleted.WithLabels({}), s.persisted_deleted);
    index_damaged.WithLabels({}).Set(s.index_damaged ? 1 : 0);
    lost_writes.WithLabels({}).Set(static_cast<double>(s.index_lost_writes));
    unbacked.WithLabels({}).Set(static_cast<double>(s.unbacked_records));
    rebuilt.WithLabels({}).Set(static_cast<double>(s.index_rebuilt_sessions));
    rebuild_skipped.WithLabels({}).Set(static_cast<double>(s.index_rebuild_skipped_sessions));
  });
}

}  // namespace strata::storage
