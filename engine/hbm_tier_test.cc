// The HBM tier through the engine, on the CPU backend's memory: returning turns reuse
// their resident KV with no copy, answers equal those with the cache off, and resident
// sessions give way to running turns and to the tier's capacity in the policy's order.
#include "engine/hbm_tier.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "storage/session_store.h"
#include "text/tokenizer.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::LimitedBackend;
using testing::SmallConfig;
using testing::TurnOutput;

class HbmTierTest : public ::testing::Test {
 protected:
  // `sequences`: how many sequences the backend's memory holds at once (0: unbounded).
  void Build(int64_t hbm_bytes, int sequences = 0) {
    engine_.reset();
    store_.reset();
    registry_ = std::make_unique<metrics::Registry>();
    model::ModelConfig c = SmallConfig();
    auto cpu = std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens()));
    store_ = testing::HostOnlyStore(c, cpu->weights().fingerprint());
    std::unique_ptr<model::ModelBackend> backend = std::move(cpu);
    if (sequences > 0) {
      backend = std::make_unique<LimitedBackend>(
          std::unique_ptr<model::CpuModel>(static_cast<model::CpuModel*>(backend.release())), sequences, 512);
    }
    EngineOptions options;
    options.hbm.capacity_bytes = hbm_bytes;
    options.hbm.placement = storage::PlacementPolicy::kLru;
    auto e = Engine::Create(options, std::move(backend), &tokenizer_, store_.get(), registry_.get());
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }

  // One turn of `session`: its conversation so far plus a new user message.
  TurnOutput Turn(const std::string& session, const std::string& user) {
    std::vector<text::ChatMessage>& conv = conversations_[session];
    conv.push_back({"user", user});
    TurnOutput out = Collect(*engine_->Submit(testing::ChatTurn(tokenizer_, session, conv, 8)));
    EXPECT_TRUE(out.status.ok()) << out.status;
    conv.push_back({"assistant", out.text});
    return out;
  }

  text::ByteTokenizer tokenizer_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<storage::SessionStore> store_;
  std::unique_ptr<Engine> engine_;  // last: goes first
  std::map<std::string, std::vector<text::ChatMessage>> conversations_;
};

TEST_F(HbmTierTest, ReturningTurnReusesItsResidentKvAndAnswersAsWithoutIt) {
  std::vector<std::vector<int32_t>> answers[2];
  for (int hbm : {1, 0}) {
    conversations_.clear();
    Build(hbm ? -1 : 0);
    for (const char* user : {"Hello there.", "And then?", "Thanks!"}) answers[hbm].push_back(Turn("s", user).tokens);
  }
  EXPECT_EQ(answers[1], answers[0]) << "answers with the HBM tier differ from answers from the host tier";
  conversations_.clear();
  Build(-1);
  Turn("s", "Hello there.");
  TurnOutput second = Turn("s", "And then?");
  EXPECT_EQ(second.result.cache_tier, storage::Tier::kHbm);
  EXPECT_GT(second.result.usage.cached_tokens, 0);
  // The session returns to the HBM tier once its write-back completes, after ChatDone.
  ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(10)));
  const std::string text = registry_->Serialize();
  EXPECT_NE(text.find("strata_cache_hits_total{tier=\"hbm\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_sessions{tier=\"hbm\"} 1"), std::string::npos) << text;
}

// A session whose next finished turn is not kept (here: a result no longer than its base)
// leaves the tier, and the tier's gauges say so at once.
TEST(HbmTierGaugesTest, ASessionKeptNoMoreLeavesTheGauges) {
  text::ByteTokenizer tokenizer;
  model::CpuModel model(model::ModelWeights::Random(SmallConfig(), 99, tokenizer.SilentTokens()));
  metrics::Registry registry;
  HbmTier tier({.capacity_bytes = int64_t{64} << 20}, &model, &registry);
  const storage::SessionKey key{"t", "s"};
  auto seq = model.NewSequence(32);
  ASSERT_TRUE(seq.ok());
  tier.Keep(key, *std::move(seq), std::vector<int32_t>(20, 7), 0);
  EXPECT_EQ(testing::Exported(registry, "strata_sessions{tier=\"hbm\"}"), 1);
  EXPECT_GT(testing::Exported(registry, "strata_tier_bytes{tier=\"hbm\"}"), 0);
  auto next = model.NewSequence(32);
  ASSERT_TRUE(next.ok());
  tier.Keep(key, *std::move(next), std::vector<int32_t>(4, 7), /*base_tokens=*/4);  // nothing of its own
  EXPECT_EQ(testing::Exported(registry, "strata_sessions{tier=\"hbm\"}"), 0);
  EXPECT_EQ(testing::Exported(registry, "strata_tier_bytes{tier=\"hbm\"}"), 0);
}

// strata_kv_transfer_bytes_total: a turn served from the host tier loads exactly its
// reused tokens' KV; one served from HBM copies nothing in; every finished turn's
// write-back is counted as saved.
TEST_F(HbmTierTest, TransferBytesCountWhatWasLoadedAndSaved) {
  const model::ModelConfig c = SmallConfig();
  const double token_bytes = 2.0 * c.num_layers * c.kv_dim() * 4;  // K and V rows, fp32, every layer
  auto value = [&](const std::string& key) { return testing::Exported(*registry_, key); };
  const std::string load = "strata_kv_transfer_bytes_total{direction=\"load\"}";
  const std::string save = "strata_kv_transfer_bytes_total{direction=\"save\"}";
  for (int hbm : {0, 1}) {
    conversations_.clear();
    Build(hbm ? -1 : 0);
    EXPECT_EQ(value(load), 0);
    EXPECT_EQ(value(save), 0);
    Turn("s", "Hello there.");
    ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(10)));
    const double saved = value(save);
    EXPECT_GT(saved, 0) << "turn 1's write-back";
    EXPECT_EQ(std::fmod(saved, token_bytes), 0) << "whole tokens of every layer";
    EXPECT_EQ(value(load), 0) << "turn 1 reused nothing";
    const TurnOutput second = Turn("s", "And then?");
    ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(10)));
    ASSERT_GT(second.result.usage.cached_tokens, 0);
    if (hbm) {
      EXPECT_EQ(second.result.cache_tier, storage::Tier::kHbm);
      EXPECT_EQ(value(load), 0) << "a turn served from HBM copies nothing in";
    } else {
      EXPECT_EQ(second.result.cache_tier, storage::Tier::kHost);
      EXPECT_EQ(value(load), second.result.usage.cached_tokens * token_bytes);
    }
    EXPECT_GT(value(save), saved) << "turn 2's write-back";
    // A host backend's copies complete as called: no device time, nothing to wait for.
    EXPECT_EQ(value("strata_kv_load_stall_seconds_total"), 0);
  }
}

TEST_F(HbmTierTest, ResidentSessionsGiveWayToRunningTurnsLeastRecentlyUsedFirst) {
  Build(-1, /*sequences=*/2);
  Turn("a", "First question.");
  Turn("b", "Second question.");
  // Both are resident; a third session needs a sequence: the least recently used (a)
  // leaves HBM, its KV still on the host tier.
  Turn("c", "Third question.");
  EXPECT_EQ(Turn("a", "More?").result.cache_tier, storage::Tier::kHost) << "a should have left HBM";
  // a's return needed room too: b (now least recently used) went; c stayed.
  EXPECT_EQ(Turn("c", "More?").result.cache_tier, storage::Tier::kHbm);
}

TEST_F(HbmTierTest, CapacityBoundsTheResidentSessions) {
  // Room for about one small session: the second evicts the first.
  Build(/*hbm_bytes=*/SmallConfig().num_layers * SmallConfig().kv_dim() * 4 * 3 * 40);
  Turn("a", "First question.");
  Turn("b", "Second question.");
  EXPECT_EQ(Turn("a", "More?").result.cache_tier, storage::Tier::kHost);
  ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(10)));
  const std::string text = registry_->Serialize();
  EXPECT_NE(text.find("strata_sessions{tier=\"hbm\"} 1"), std::string::npos) << text;
}

TEST_F(HbmTierTest, DroppedSessionIsNotServedFromHbm) {
  Build(-1);
  Turn("s", "Hello there.");
  ASSERT_TRUE(store_->Drop({"t", "s"}).ok());
  TurnOutput after = Turn("s", "Still there?");
  EXPECT_EQ(after.result.usage.cached_tokens, 0) << "a dropped session's resident KV was reused";
  EXPECT_EQ(after.result.cache_tier, storage::Tier::kNone);
}

TEST_F(HbmTierTest, EditedHistoryReusesOnlyTheSharedPrefixFromHbm) {
  Build(-1);
  Turn("s", "Hello there.");
  // The client rewrites history: only the shared start is reused, the rest recomputed,
  // and the answer equals a fresh session's.
  conversations_["s"] = {{"user", "Hello again, different start."}};
  conversations_["fresh"] = {{"user", "Hello again, different start."}};
  TurnOutput edited = Turn("s", "Go on.");
  TurnOutput fresh = Turn("fresh", "Go on.");
  EXPECT_EQ(edited.tokens, fresh.tokens);
  EXPECT_LT(edited.result.usage.cached_tokens, edited.result.usage.prompt_tokens / 2);
}

}  // namespace
}  // namespace strata::engine
