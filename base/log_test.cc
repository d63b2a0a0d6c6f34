#include "base/log.h"

#include <atomic>
#include <cstdint>

#include "gtest/gtest.h"

namespace strata::logging {
namespace {

TEST(LogEveryTest, OnceAPeriodFromOneSite) {
  std::atomic<int64_t> site{INT64_MIN};
  EXPECT_TRUE(ShouldLogEvery(&site, 3600));   // the first time
  EXPECT_FALSE(ShouldLogEvery(&site, 3600));  // within the hour
  EXPECT_TRUE(ShouldLogEvery(&site, 0));      // a period of zero: every time
  std::atomic<int64_t> other{INT64_MIN};
  EXPECT_TRUE(ShouldLogEvery(&other, 3600));  // each site keeps its own clock
}

TEST(LogEveryTest, MacroWritesOnlyTheFirstLineOfAPeriod) {
  int evaluated = 0;
  for (int i = 0; i < 5; ++i) {
    LOG_EVERY_N_SEC(INFO, 3600) << "line " << ++evaluated;
  }
  EXPECT_EQ(evaluated, 1);  // the stream is not even built for the silenced lines
}

}  // namespace
}  // namespace strata::logging
