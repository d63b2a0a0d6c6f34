// The batch runner over a real engine (CPU backend, small random model): every result
// equals the prompt alone with the cache off, whatever the planning; the engine shares
// exactly what the plan says; bad prompts get their own errors; the KV window bounds what
// is in flight; prefixes are freed; a stopped batch reports every prompt once.
#include "batch/batch_runner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"

namespace strata::batch {
namespace {

using engine::testing::Collect;
using engine::testing::SmallConfig;

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 32 + (i * (11 + salt) + 7 * salt) % 90;
  return t;
}

// A system part, 3 documents, 4 questions each, and 2 prompts that share nothing.
std::vector<engine::TurnRequest> TwoLevelBatch() {
  std::vector<engine::TurnRequest> items;
  const auto system = Tokens(40, 1);
  for (int d = 0; d < 3; ++d) {
    const auto doc = Tokens(70, 10 + d);
    for (int q = 0; q < 4; ++q) {
      engine::TurnRequest t;
      t.prompt = system;
      t.prompt.insert(t.prompt.end(), doc.begin(), doc.end());
      const auto question = Tokens(6 + q, 50 + 4 * d + q);
      t.prompt.insert(t.prompt.end(), question.begin(), question.end());
      t.max_new_tokens = 4 + 3 * q;
      items.push_back(std::move(t));
    }
  }
  for (int k = 0; k < 2; ++k) {
    engine::TurnRequest t;
    t.prompt = Tokens(30, 90 + k);
    t.max_new_tokens = 8;
    items.push_back(std::move(t));
  }
  return items;
}

// The CPU backend saying its KV memory holds `tokens` (as a GPU pool would).
class StatedCapacity final : public engine::testing::CpuBackendWrapper {
 public:
  StatedCapacity(std::unique_ptr<model::CpuModel> inner, int64_t tokens)
      : CpuBackendWrapper(std::move(inner), "cpu"), tokens_(tokens) {}
  int64_t kv_capacity_tokens() const override { return tokens_; }

 private:
  int64_t tokens_;
};

class BatchRunnerTest : public ::testing::Test {
 protected:
  std::unique_ptr<engine::Engine> MakeEngine(int64_t kv_tokens = 0) {
    auto cpu = std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer_.SilentTokens()));
    std::unique_ptr<model::ModelBackend> model = std::move(cpu);
    if (kv_tokens > 0) {
      model = std::make_unique<StatedCapacity>(
          std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer_.SilentTokens())),
          kv_tokens);
    }
    engine::EngineOptions options;
    options.warmup_tokens = 0;
    auto e = engine::Engine::Create(options, std::move(model), &tokenizer_, nullptr, nullptr);
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }
  // Each prompt alone as a chat turn, the cache off.
  std::vector<std::vector<int32_t>> Alone(const std::vector<engine::TurnRequest>& items) {
    auto engine = MakeEngine();
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < items.size(); ++i) {
      engine::TurnRequest t = items[i];
      t.key = {"t", "alone-" + std::to_string(i)};
      auto s = engine->Submit(t);
      if (!s.ok()) {
        out.emplace_back();
        continue;
      }
      out.push_back(Collect(*s).tokens);
    }
    return out;
  }

  text::ByteTokenizer tokenizer_;
};

TEST_F(BatchRunnerTest, EveryPlanningAnswersAsEachPromptAloneAndSharesWhatThePlanSays) {
  const auto items = TwoLevelBatch();
  const auto alone = Alone(items);
  for (Planning planning : {Planning::kGlobal, Planning::kFirstLevel, Planning::kNone}) {
    SCOPED_TRACE(static_cast<int>(planning));
    auto engine = MakeEngine();
    BatchRunner runner(engine.get(), "t", RunnerOptions{.planning = planning});
    std::map<int, ItemResult> results;
    const RunSummary summary = runner.Run(items, [&](ItemResult r) {
      EXPECT_TRUE(results.emplace(r.index, r).second) << "two results for " << r.index;
    });
    ASSERT_EQ(results.size(), items.size());
    EXPECT_EQ(summary.completed, static_cast<int64_t>(items.size()));
    EXPECT_EQ(summary.failed, 0);
    int64_t computed = 0;
    for (const PlanGroup& g : summary.plan.groups) computed += g.prefix_tokens;
    for (auto& [i, r] : results) {
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.token_ids, alone[static_cast<size_t>(i)]) << "item " << i;
      EXPECT_EQ(r.usage.prompt_tokens, static_cast<int64_t>(items[static_cast<size_t>(i)].prompt.size()));
      computed += r.usage.prompt_tokens - r.usage.cached_tokens;
    }
    EXPECT_EQ(computed, summary.plan.computed_tokens) << "the engine shares exactly the planned prefixes";
    EXPECT_TRUE(engine->ListSystemPrompts("t").empty()) << "every group's prefix is freed";
  }
  // The DP shares the documents: 3 groups of 110 tokens (page size 1 on the CPU).
  auto engine = MakeEngine();
  const RunSummary global = BatchRunner(engine.get(), "t", {}).Run(items, [](ItemResult) {});
  std::vector<int64_t> prefixes;
  for (const PlanGroup& g : global.plan.groups) prefixes.push_back(g.prefix_tokens);
  std::sort(prefixes.begin(), prefixes.end());
  EXPECT_EQ(prefixes, (std::vector<int64_t>{0, 110, 110, 110}));  // the two unrelated prompts alone
  EXPECT_GT(global.plan.saving_ratio(), 0.6);
}

TEST_F(BatchRunnerTest, BadPromptsFailAloneAndTheRestCompletes) {
  auto items = TwoLevelBatch();
  items[2].prompt.clear();                                         // empty
  items[5].prompt = Tokens(static_cast<int>(SmallConfig().max_context), 3);  // over the context
  items[7].prompt.push_back(100000);                               // outside the vocabulary
  items[9].max_new_tokens = 0;                                     // no answer asked
  const auto alone = Alone(items);
  auto engine = MakeEngine();
  std::map<int, ItemResult> results;
  const RunSummary summary =
      BatchRunner(engine.get(), "t", {}).Run(items, [&](ItemResult r) { results.emplace(r.index, r); });
  ASSERT_EQ(results.size(), items.size());
  for (int bad : {2, 5, 7, 9}) {
    EXPECT_EQ(results[bad].status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << results[bad].status;
  }
  EXPECT_EQ(summary.failed, 4);
  EXPECT_EQ(summary.completed, static_cast<int64_t>(items.size()) - 4);
  for (auto& [i, r] : results) {
    if (r.status.ok()) EXPECT_EQ(r.token_ids, alone[static_cast<size_t>(i)]) << i;
  }
}

TEST_F(BatchRunnerTest, ASmallKvMemoryRunsTheBatchInWindows) {
  // 150 tokens for the batch: a 110-token group prefix and two of its prompts (up to 21
  // tokens each with their answers) at a time. The runner waits for room, not the engine.
  const auto items = TwoLevelBatch();
  const auto alone = Alone(items);
  auto engine = MakeEngine(/*kv_tokens=*/200);
  std::map<int, ItemResult> results;
  BatchRunner(engine.get(), "t", RunnerOptions{.kv_fraction = 0.75}).Run(items, [&](ItemResult r) {
    results.emplace(r.index, r);
  });
  EXPECT_LE(engine->Stats().max_batch_turns, 2);
  ASSERT_EQ(results.size(), items.size());
  for (auto& [i, r] : results) {
    ASSERT_TRUE(r.status.ok()) << i << ": " << r.status;
    EXPECT_EQ(r.token_ids, alone[static_cast<size_t>(i)]) << i;
  }
}

TEST_F(BatchRunnerTest, AStoppedBatchReportsEveryPromptOnce) {
  const auto items = TwoLevelBatch();
  auto engine = MakeEngine();
  std::set<int> seen;
  int ok = 0, cancelled = 0;
  BatchRunner(engine.get(), "t", RunnerOptions{.max_in_flight = 2})
      .Run(
          items,
          [&](ItemResult r) {
            EXPECT_TRUE(seen.insert(r.index).second);
            ok += r.status.ok();
            cancelled += absl::IsCancelled(r.status);
          },
          [&] { return ok >= 1; });
  EXPECT_EQ(seen.size(), items.size());
  EXPECT_GE(ok, 1);
  EXPECT_GE(cancelled, static_cast<int>(items.size()) - 4);
  EXPECT_EQ(ok + cancelled, static_cast<int>(items.size()));
  EXPECT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
}

}  // namespace
}  // namespace strata::batch
