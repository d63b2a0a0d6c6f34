// Per-tenant series (tenant_metrics.h): absent unless EngineOptions::metrics_tenant_label
// asks for them; with it, each tenant's turns, computed and reused prompt tokens and
// generated tokens, summing to the engine's unlabelled counters.
#include "engine/tenant_metrics.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "base/prometheus_text.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "text/tokenizer.h"

namespace strata::engine {
namespace {

using testing::ChatTurn;
using testing::Collect;
using testing::HostOnlyStore;
using testing::SmallConfig;
using testing::TurnOutput;

class TenantMetricsTest : public ::testing::Test {
 protected:
  // An engine with a host-tier cache, counting into registry_.
  void Build(bool tenant_label) {
    const model::ModelConfig c = SmallConfig();
    auto cpu = std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens()));
    store_ = HostOnlyStore(c, cpu->weights().fingerprint());
    EngineOptions options;
    options.warmup_tokens = 0;
    options.metrics_tenant_label = tenant_label;
    auto e = Engine::Create(options, std::move(cpu), &tokenizer_, store_.get(), &registry_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }

  // One turn of `tenant`'s `session`, run to its end and written back.
  TurnOutput Run(const std::string& tenant, const std::string& session,
                 const std::vector<text::ChatMessage>& messages) {
    TurnRequest r = ChatTurn(tokenizer_, session, messages, 8);
    r.key.tenant = tenant;
    TurnOutput out = Collect(*engine_->Submit(std::move(r)));
    EXPECT_TRUE(engine_->AwaitIdle(absl::Seconds(60)));
    return out;
  }

  std::map<std::string, double> Samples() {
    auto samples = metrics::ParsePrometheusText(registry_.Serialize());
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? *samples : std::map<std::string, double>{};
  }

  text::ByteTokenizer tokenizer_;
  metrics::Registry registry_;  // outlives the engine
  std::unique_ptr<storage::SessionStore> store_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(TenantMetricsTest, NoTenantSeriesByDefault) {
  Build(/*tenant_label=*/false);
  ASSERT_TRUE(Run("acme", "s", {{"user", "Who uses the cache?"}}).status.ok());
  const std::string exposition = registry_.Serialize();
  EXPECT_EQ(exposition.find("strata_tenant_"), std::string::npos) << exposition;
  EXPECT_EQ(exposition.find("acme"), std::string::npos) << "no series names the tenant";
  EXPECT_EQ(Samples()["strata_finished_turns_total{reason=\"length\"}"], 1) << "the turn was counted";
}

TEST_F(TenantMetricsTest, CountsEachTenantsTurnsAndTokensWhenOn) {
  Build(/*tenant_label=*/true);
  const std::vector<text::ChatMessage> first = {{"user", "Who uses the cache?"}};
  const TurnOutput a1 = Run("acme", "s", first);
  ASSERT_TRUE(a1.status.ok()) << a1.status;
  std::vector<text::ChatMessage> second = first;
  second.push_back({"assistant", a1.text});
  second.push_back({"user", "And how much of it?"});
  const TurnOutput a2 = Run("acme", "s", second);
  ASSERT_TRUE(a2.status.ok()) << a2.status;
  ASSERT_GT(a2.result.usage.cached_tokens, 0) << "acme's second turn reuses its first";
  const TurnOutput b = Run("globex", "s", first);
  ASSERT_TRUE(b.status.ok()) << b.status;

  std::map<std::string, double> m = Samples();
  EXPECT_EQ(m["strata_tenant_turns_total{tenant=\"acme\"}"], 2);
  EXPECT_EQ(m["strata_tenant_turns_total{tenant=\"globex\"}"], 1);
  EXPECT_EQ(m["strata_tenant_prompt_tokens_total{source=\"reused\",tenant=\"acme\"}"],
            static_cast<double>(a2.result.usage.cached_tokens));
  EXPECT_EQ(m["strata_tenant_prompt_tokens_total{source=\"computed\",tenant=\"acme\"}"],
            static_cast<double>(a1.result.usage.computed_tokens + a2.result.usage.computed_tokens));
  EXPECT_EQ(m["strata_tenant_prompt_tokens_total{source=\"reused\",tenant=\"globex\"}"], 0)
      << "the same conversation under another tenant is not acme's session";
  EXPECT_EQ(m["strata_tenant_prompt_tokens_total{source=\"computed\",tenant=\"globex\"}"],
            static_cast<double>(b.result.usage.prompt_tokens));
  EXPECT_EQ(m["strata_tenant_generated_tokens_total{tenant=\"acme\"}"],
            static_cast<double>(a1.result.usage.completion_tokens + a2.result.usage.completion_tokens));
  EXPECT_EQ(m["strata_tenant_generated_tokens_total{tenant=\"globex\"}"],
            static_cast<double>(b.result.usage.completion_tokens));
  // Summed over tenants: the unlabelled counters.
  for (const char* source : {"computed", "reused"}) {
    const std::string s = source;
    EXPECT_EQ(m["strata_tenant_prompt_tokens_total{source=\"" + s + "\",tenant=\"acme\"}"] +
                  m["strata_tenant_prompt_tokens_total{source=\"" + s + "\",tenant=\"globex\"}"],
              m["strata_prefill_tokens_total{source=\"" + s + "\"}"])
        << source;
  }
  EXPECT_EQ(m["strata_tenant_generated_tokens_total{tenant=\"acme\"}"] +
                m["strata_tenant_generated_tokens_total{tenant=\"globex\"}"],
            m["strata_generated_tokens_total"]);
}

}  // namespace
}  // namespace strata::engine
