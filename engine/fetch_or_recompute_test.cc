// Fetch or recompute: a returning turn whose history is held only on SSD is loaded or
// recomputed, whichever the measured speeds say is faster, from the very first decision
// (the SSD's read speed known at start, the prefill speed from the engine's warm-up);
// either way the answer is the one the cache-off engine gives.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "base/metrics.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "storage/testing/temp_dir.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::SmallConfig;
using testing::TurnOutput;

class FetchOrRecomputeTest : public ::testing::Test {
 protected:
  // `ssd_bytes_per_second`: the SSD read speed the store assumes (< 0: none and no probe,
  // so nothing is known before the first promotion); `cache`: false for no store at all.
  void Build(bool cache, double ssd_bytes_per_second) {
    engine_.reset();  // before the store and registry it uses
    store_.reset();
    tmp_ = std::make_unique<storage::testing::TempDir>("strata-fetch");
    const model::ModelConfig c = SmallConfig();
    auto model = std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens()));
    if (cache) {
      storage::SessionStoreOptions so;
      so.layout = Engine::ChunkLayoutFor(c, 16);
      so.host_capacity_bytes = 6 * so.layout.BlockBytes();  // one session at a time
      so.model_fingerprint = model->weights().fingerprint();
      std::filesystem::create_directories(*tmp_ / "ssd");
      so.ssd_dirs = {*tmp_ / "ssd"};
      so.ssd_capacity_bytes_per_dir = 64 * so.layout.BlockBytes();
      so.index_dir = *tmp_ / "index";
      if (ssd_bytes_per_second < 0) {
        so.ssd_probe_bytes = 0;
      } else {
        so.ssd_read_bytes_per_second = ssd_bytes_per_second;
      }
      store_ = *storage::SessionStore::Create(so);
    }
    EngineOptions eo;
    eo.hbm.capacity_bytes = 0;  // nothing stays resident: the history is on SSD or nowhere
    registry_ = std::make_unique<metrics::Registry>();
    auto e = Engine::Create(eo, std::move(model), &tokenizer_, store_.get(), registry_.get());
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }

  TurnOutput Run(const std::string& session, const std::vector<text::ChatMessage>& messages) {
    auto stream = engine_->Submit(testing::ChatTurn(tokenizer_, session, messages, 10));
    EXPECT_TRUE(stream.ok()) << stream.status();
    return Collect(*stream);
  }

  // Session "a" answers once, is persisted, and is pushed off the host tier by "b" (then
  // persisted too): a's second turn finds its history only on SSD. Returns that turn.
  TurnOutput SecondTurnFromSsd() {
    std::vector<text::ChatMessage> a = {{"user", "Tell me about the session cache, please."}};
    TurnOutput first = Run("a", a);
    a.push_back({"assistant", first.text});
    a.push_back({"user", "And then?"});
    if (store_ != nullptr) {
      EXPECT_TRUE(store_->Flush({"t", "a"}, absl::Seconds(10)).ok());
      Run("b", {{"user", "A longer conversation that needs the whole host tier for itself, and then some more."}});
      auto info = store_->Get({"t", "a"});
      EXPECT_TRUE(info.ok() && info->tier == storage::Tier::kSsd) << "a was not demoted to SSD";
      // b persisted too, so it can leave the host tier to make room for a's promotion.
      EXPECT_TRUE(store_->Flush({"t", "b"}, absl::Seconds(10)).ok());
    }
    return Run("a", a);
  }

  // strata_ssd_fetch_decisions_total{choice}: what operators see of the choice.
  double Decisions(const std::string& choice) {
    return testing::Exported(*registry_, "strata_ssd_fetch_decisions_total{choice=\"" + choice + "\"}");
  }

  text::ByteTokenizer tokenizer_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<storage::testing::TempDir> tmp_;
  std::unique_ptr<storage::SessionStore> store_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(FetchOrRecomputeTest, TheWarmUpMeasuresThePrefillSpeedBeforeAnyTurn) {
  Build(/*cache=*/false, 0);
  EXPECT_GT(engine_->Stats().prefill_tokens_per_second, 0);
  EXPECT_EQ(engine_->Stats().steps, 0) << "the warm-up is not a step of the loop";
}

// An SSD slower than recomputing (assumed 1 KB/s): the first SSD-only turn recomputes.
TEST_F(FetchOrRecomputeTest, ASlowSsdIsRecomputedFromTheFirstDecision) {
  Build(/*cache=*/false, 0);
  const TurnOutput want = SecondTurnFromSsd();
  Build(/*cache=*/true, 1000.0);
  const TurnOutput got = SecondTurnFromSsd();
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(engine_->Stats().recomputed_instead_of_load, 1);
  EXPECT_EQ(Decisions("recompute"), 1);
  EXPECT_EQ(Decisions("load"), 0);
  EXPECT_EQ(got.result.usage.cached_tokens, 0);
  EXPECT_EQ(got.result.cache_tier, storage::Tier::kNone);
  EXPECT_EQ(got.tokens, want.tokens);
}

// An SSD faster than recomputing (assumed 1 TB/s): loaded, an SSD hit.
TEST_F(FetchOrRecomputeTest, AFastSsdIsLoaded) {
  Build(/*cache=*/false, 0);
  const TurnOutput want = SecondTurnFromSsd();
  Build(/*cache=*/true, 1e12);
  const TurnOutput got = SecondTurnFromSsd();
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(engine_->Stats().recomputed_instead_of_load, 0);
  EXPECT_EQ(Decisions("load"), 1);
  EXPECT_EQ(Decisions("recompute"), 0);
  EXPECT_GT(got.result.usage.cached_tokens, 0);
  EXPECT_EQ(got.result.cache_tier, storage::Tier::kSsd);
  EXPECT_EQ(got.tokens, want.tokens);
}

// With the probe off and no speed assumed, nothing is known before a promotion: the SSD
// copy is loaded (the behaviour the probe exists to avoid on a slow disk).
TEST_F(FetchOrRecomputeTest, WithoutAKnownSsdSpeedTheFirstSsdHitIsLoaded) {
  Build(/*cache=*/true, -1);
  const TurnOutput got = SecondTurnFromSsd();
  EXPECT_EQ(engine_->Stats().recomputed_instead_of_load, 0);
  EXPECT_EQ(got.result.cache_tier, storage::Tier::kSsd);
}

}  // namespace
}  // namespace strata::engine
