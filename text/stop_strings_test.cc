#include "text/stop_strings.h"

#include "gtest/gtest.h"

namespace strata::text {
namespace {

TEST(StopStringFilterTest, HoldsBackPossibleStartOfStop) {
  StopStringFilter f({"END"});
  EXPECT_EQ(f.Feed("abc E"), "abc ");
  EXPECT_EQ(f.Feed("N"), "");
  EXPECT_EQ(f.Feed("x"), "ENx");  // not a stop after all: released
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilterTest, DropsStopAndEverythingAfter) {
  StopStringFilter f({"\n\n", "STOP"});
  EXPECT_EQ(f.Feed("one ST"), "one ");
  EXPECT_EQ(f.Feed("OP tail"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.Feed("more"), "");
  EXPECT_EQ(f.Flush(), "");
}

TEST(StopStringFilterTest, FlushReleasesHeldText) {
  StopStringFilter f({"abc"});
  EXPECT_EQ(f.Feed("xab"), "x");
  EXPECT_EQ(f.Flush(), "ab");
}

TEST(StopStringFilterTest, NoStopsPassesEverything) {
  StopStringFilter f({});
  EXPECT_EQ(f.Feed("anything"), "anything");
}

}  // namespace
}  // namespace strata::text
