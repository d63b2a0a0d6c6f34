#include "model/perplexity.h"

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

// -ln p(tokens[j] | tokens[start, j)), from a fresh sequence fed tokens[start,
// j) as one prefill: the definition, computed independently of the windows'
// decode steps.
double ReferenceNll(CpuModel& m, const std::vector<int32_t>& tokens, int64_t start, int64_t j) {
  auto seq = m.NewSequence(j - start);
  EXPECT_TRUE(seq.ok());
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  ForwardEntry e{seq->get(), 0, absl::MakeConstSpan(tokens).subspan(start, j - start), logits.data()};
  EXPECT_TRUE(m.Forward({&e, 1}).ok());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  return std::log(sum) - logits[static_cast<size_t>(tokens[j])];
}

class PerplexityTest : public ::testing::Test {
 protected:
  PerplexityTest() : model_(ModelWeights::Random(testing::TinyConfig(), 7, {})) {}
  CpuModel model_;
};

TEST_F(PerplexityTest, AWindowOverTheWholeTextScoresEveryTokenOnAllBeforeIt) {
  const auto tokens = RandomTokens(40, model_.config().vocab_size, 1);
  PerplexityOptions o;
  o.window = 64;
  o.stride = 64;
  auto r = TeacherForcedNll(model_, tokens, o);
  ASSERT_TRUE(r.ok()) << r.status();
  double want = 0;
  for (int64_t j = 1; j < 40; ++j) want += ReferenceNll(model_, tokens, 0, j);
  EXPECT_EQ(r->scored_tokens, 39);
  EXPECT_NEAR(r->nll_nats, want, 1e-4 * want);
}

TEST_F(PerplexityTest, SlidingWindowsGiveEachTokenItsWindowsContextAndBatchingChangesNothing) {
  const int n = 70;
  const auto tokens = RandomTokens(n, model_.config().vocab_size, 2);
  PerplexityOptions o;
  o.window = 16;
  o.stride = 6;
  // Target j is scored by the window whose inputs [begin, end) hold j - 1; its
  // inputs start at max(0, end - window).
  double want = 0;
  for (int64_t begin = 0; begin < n - 1; begin += o.stride) {
    const int64_t end = std::min<int64_t>(begin + o.stride, n - 1);
    for (int64_t j = begin + 1; j <= end; ++j)
      want += ReferenceNll(model_, tokens, std::max<int64_t>(0, end - o.window), j);
  }
  for (int batch : {1, 3, 64}) {
    o.batch = batch;
    auto r = TeacherForcedNll(model_, tokens, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->scored_tokens, n - 1) << "batch " << batch;
    EXPECT_NEAR(r->nll_nats, want, 1e-4 * want) << "batch " << batch;
  }
  // A shorter window loses context: on random weights the sum moves.
  o.window = 6;
  auto shorter = TeacherForcedNll(model_, tokens, o);
  ASSERT_TRUE(shorter.ok());
  EXPECT_GT(std::abs(shorter->nll_nats - want), 1e-3 * want);
}

TEST_F(PerplexityTest, BadArgumentsAreInvalidArgument) {
  const auto tokens = RandomTokens(10, model_.config().vocab_size, 3);
  PerplexityOptions o;
  o.window = 8;
  o.stride = 4;
  EXPECT_TRUE(absl::IsInvalidArgument(TeacherForcedNll(model_, absl::MakeConstSpan(tokens).first(1), o).status()));
  std::vector<int32_t> bad = tokens;
  bad[5] = model_.config().vocab_size;
  EXPECT_TRUE(absl::IsInvalidArgument(TeacherForcedNll(model_, bad, o).status()));
  PerplexityOptions wide = o;
  wide.stride = 9;
  EXPECT_TRUE(absl::IsInvalidArgument(TeacherForcedNll(model_, tokens, wide).status()));
  PerplexityOptions long_window = o;
  long_window.window = model_.config().max_context + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(TeacherForcedNll(model_, tokens, long_window).status()));
}

}  // namespace
}  // namespace strata::model
