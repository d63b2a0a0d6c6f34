#include "engine/tenant_metrics.h"

namespace strata::engine {

TenantMetrics::TenantMetrics(metrics::Registry& registry)
    : turns_(registry.AddCounter("strata_tenant_turns_total", "Turns that ended, by tenant (any reason).")),
      prompt_tokens_(registry.AddCounter("strata_tenant_prompt_tokens_total",
                                         "Prompt tokens by tenant and source: computed or reused from cache.")),
      generated_tokens_(registry.AddCounter("strata_tenant_generated_tokens_total",
                                            "Tokens generated, by tenant (counted as each turn ends).")) {}

void TenantMetrics::PromptTokens(const std::string& tenant, int64_t computed, int64_t reused) {
  prompt_tokens_.WithLabels({{"source", "computed"}, {"tenant", tenant}}).Increment(static_cast<double>(computed));
  prompt_tokens_.WithLabels({{"source", "reused"}, {"tenant", tenant}}).Increment(static_cast<double>(reused));
}

void TenantMetrics::TurnEnded(const std::string& tenant, int64_t generated) {
  turns_.WithLabels({{"tenant", tenant}}).Increment();
  generated_tokens_.WithLabels({{"tenant", tenant}}).Increment(static_cast<double>(generated));
}

}  // namespace strata::engine
