#include "model/truncation_eval.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "model/model_weights.h"
#include "model/testing/random_tokens.h"
#include "model/testing/tiny_config.h"

namespace strata::model {
namespace {

using testing::RandomTokens;

TruncationEvalResult Stream(CpuModel& m, const std::vector<int32_t>& tokens, TruncationMode mode) {
  TruncationEvalOptions o;
  o.window = 24;
  o.keep = 0.5;
  o.streams = 3;
  auto r = StreamWithTruncation(m, tokens, mode, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : TruncationEvalResult{};
}

// With one layer, a kept token's K and V depend on the token alone (not on attention over
// what was dropped): the stored KV re-rotated to the new positions must give exactly the
// recomputed logits, for plain and llama3-scaled RoPE; without re-rotation they must not.
TEST(TruncationEvalTest, OneLayerStoredKvReRotatedIsTheRecomputation) {
  for (bool llama3 : {false, true}) {
    ModelConfig c = testing::TinyConfig();
    c.num_layers = 1;
    c.rope_theta = 500000.0f;
    if (llama3) c.rope_scaling = {.llama3 = true, .factor = 8, .original_max_position = 16};
    CpuModel m(ModelWeights::Random(c, 11, {}));
    const auto tokens = RandomTokens(3 * 70, c.vocab_size, 5);
    const TruncationEvalResult stored = Stream(m, tokens, TruncationMode::kStoredKv);
    const TruncationEvalResult recomputed = Stream(m, tokens, TruncationMode::kRecompute);
    const TruncationEvalResult moved = Stream(m, tokens, TruncationMode::kNoReRotation);
    ASSERT_GT(stored.scored_tokens, 100);
    EXPECT_EQ(stored.scored_tokens, recomputed.scored_tokens);
    EXPECT_EQ(stored.truncations, 3 * 4) << "70 tokens a stream: truncated at 24, 36, 48, 60";
    EXPECT_NEAR(stored.nll_nats, recomputed.nll_nats, 1e-5 * recomputed.nll_nats) << "llama3 " << llama3;
    EXPECT_GT(std::abs(moved.nll_nats - recomputed.nll_nats), 1e-3 * recomputed.nll_nats) << "llama3 " << llama3;
  }
}

// With more layers the kept tokens' deeper KV still carries what they attended to before
// the cut, so the stored KV differs from a recomputation (that difference is what
// AttentionStore measures), while scoring the same tokens.
TEST(TruncationEvalTest, DeeperLayersKeepTraceOfTheDroppedHistory) {
  CpuModel m(ModelWeights::Random(testing::TinyConfig(), 12, {}));
  const auto tokens = RandomTokens(3 * 70, testing::TinyConfig().vocab_size, 6);
  const TruncationEvalResult stored = Stream(m, tokens, TruncationMode::kStoredKv);
  const TruncationEvalResult recomputed = Stream(m, tokens, TruncationMode::kRecompute);
  EXPECT_EQ(stored.scored_tokens, recomputed.scored_tokens);
  EXPECT_GT(std::abs(stored.nll_nats - recomputed.nll_nats), 1e-7 * recomputed.nll_nats);
}

TEST(TruncationEvalTest, BadArgumentsAreInvalidArgument) {
  CpuModel m(ModelWeights::Random(testing::TinyConfig(), 13, {}));
  const auto tokens = RandomTokens(100, testing::TinyConfig().vocab_size, 7);
  TruncationEvalOptions o;
  o.window = 24;
  o.streams = 5;  // 20 tokens a stream: too few to truncate once
  EXPECT_TRUE(absl::IsInvalidArgument(StreamWithTruncation(m, tokens, TruncationMode::kStoredKv, o).status()));
  o.streams = 1;
  o.keep = 1.0;
  EXPECT_TRUE(absl::IsInvalidArgument(StreamWithTruncation(m, tokens, TruncationMode::kStoredKv, o).status()));
  o.keep = 0.5;
  o.window = testing::TinyConfig().max_context + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(StreamWithTruncation(m, tokens, TruncationMode::kStoredKv, o).status()));
}

}  // namespace
}  // namespace strata::model
