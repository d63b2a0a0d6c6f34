// The step plan's host-side rules: the context buckets decodes are shaped by, and the
// typical length that splits a step's uneven decode rows (step_plan.h). No GPU needed.
#include "model/cuda/step_plan.h"

#include "gtest/gtest.h"

namespace strata::model::cuda_internal {
namespace {

TEST(ContextBucketTest, RoundsUpToASixteenthOfTheNextPowerOfTwoOrTwoHundredFiftySix) {
  EXPECT_EQ(ContextBucket(1), 256);
  EXPECT_EQ(ContextBucket(256), 256);
  EXPECT_EQ(ContextBucket(1100), 1280);   // grain 256 (2048 / 16 is less)
  EXPECT_EQ(ContextBucket(5200), 5632);   // grain 512 (8192 / 16)
  EXPECT_EQ(ContextBucket(16384), 16384);
}

TEST(TypicalTokensTest, OneLongRowAmongShortOnesGivesTheirMeansBucket) {
  // One row of 5,200 own tokens beside 63 of 1,100 (relay_step_bench --long): the mean's
  // bucket, well below the longest's.
  const int64_t tokens = 5200 + 63 * 1100;
  EXPECT_EQ(TypicalTokens(tokens, 64, ContextBucket(5200)), ContextBucket((tokens + 63) / 64));
  EXPECT_EQ(TypicalTokens(tokens, 64, ContextBucket(5200)), 1280);
}

TEST(TypicalTokensTest, RowsOfAboutOneLengthSplitAsTheLongestDoes) {
  EXPECT_EQ(TypicalTokens(64 * 1024, 64, ContextBucket(1024)), 0);
  // 1,000 to 1,100 tokens: one bucket for the mean and the longest.
  EXPECT_EQ(TypicalTokens(32 * 1000 + 32 * 1100, 64, ContextBucket(1100)), 0);
  EXPECT_EQ(TypicalTokens(0, 0, 0), 0) << "no decode rows";
  EXPECT_EQ(TypicalTokens(5000, 1, ContextBucket(5000)), 0) << "one row";
}

}  // namespace
}  // namespace strata::model::cuda_internal
