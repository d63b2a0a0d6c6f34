// TenantMetrics: which tenant uses the engine and its cache, one series per tenant:
//   strata_tenant_turns_total{tenant}                      turns that ended (any reason)
//   strata_tenant_prompt_tokens_total{tenant, source}      prompt tokens computed or reused
//   strata_tenant_generated_tokens_total{tenant}           tokens generated (counted as a turn ends)
// Summed over tenants they equal strata_finished_turns_total, strata_prefill_tokens_total
// and (once every turn has ended) strata_generated_tokens_total.
//
// Only with EngineOptions::metrics_tenant_label (serve --metrics_tenant_label): a label's
// values are series Prometheus keeps, so they are off by default. Tenants come from the
// server's API keys, never from what a client sends, so there are as many as keys name.
#ifndef STRATA_ENGINE_TENANT_METRICS_H_
#define STRATA_ENGINE_TENANT_METRICS_H_

#include <cstdint>
#include <string>

#include "base/metrics.h"

namespace strata::engine {

class TenantMetrics {
 public:
  // Registers the three families on `registry` (which must outlive this).
  explicit TenantMetrics(metrics::Registry& registry);

  // A turn (or shared-prompt job) of `tenant` was admitted: `computed` prompt tokens to
  // compute, `reused` loaded from the cache. Thread-safe.
  void PromptTokens(const std::string& tenant, int64_t computed, int64_t reused);
  // A turn of `tenant` ended, having generated `generated` tokens. Thread-safe.
  void TurnEnded(const std::string& tenant, int64_t generated);

 private:
  metrics::Family<metrics::Counter>& turns_;
  metrics::Family<metrics::Counter>& prompt_tokens_;
  metrics::Family<metrics::Counter>& generated_tokens_;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_TENANT_METRICS_H_
