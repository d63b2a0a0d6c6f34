#include "server/bench/rate_search.h"

#include "gtest/gtest.h"

namespace strata::server::bench {
namespace {

// p99 TTFT of a server that saturates at `knee` sessions/s.
std::function<absl::StatusOr<double>(double)> KneeAt(double knee, int* calls) {
  return [knee, calls](double rate) -> absl::StatusOr<double> {
    ++*calls;
    return rate <= knee ? 100.0 : 5000.0;
  };
}

TEST(FindRateTest, BracketsUpwardThenBisectsToTheKnee) {
  int calls = 0;
  absl::StatusOr<RateSearchResult> r =
      FindRate({.start_rate = 1, .slo_ttft_ms = 500, .max_probes = 10}, KneeAt(5.3, &calls));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(r->probes.size(), 10u);
  EXPECT_LE(r->best_rate, 5.3);
  EXPECT_GT(r->best_rate, 5.0) << "bisection should get within 6% of the knee in 10 probes";
}

TEST(FindRateTest, BracketsDownwardWhenTheStartRateMissesTheSlo) {
  int calls = 0;
  absl::StatusOr<RateSearchResult> r =
      FindRate({.start_rate = 16, .slo_ttft_ms = 500, .max_probes = 8}, KneeAt(3, &calls));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->probes[0].rate, 16);
  EXPECT_FALSE(r->probes[0].passed);
  EXPECT_LE(r->best_rate, 3);
  EXPECT_GE(r->best_rate, 2);
  EXPECT_LE(calls, 8);
}

TEST(FindRateTest, ReportsZeroWhenNoRatePasses) {
  int calls = 0;
  absl::StatusOr<RateSearchResult> r =
      FindRate({.start_rate = 1, .slo_ttft_ms = 500, .max_probes = 20, .min_rate = 0.1}, KneeAt(0.01, &calls));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->best_rate, 0);
  EXPECT_LE(calls, 5) << "halving must stop at min_rate";
}

TEST(FindRateTest, StopsOnAProbeError) {
  int calls = 0;
  auto failing = [&](double) -> absl::StatusOr<double> {
    ++calls;
    return absl::UnavailableError("server gone");
  };
  absl::StatusOr<RateSearchResult> r = FindRate({.start_rate = 1}, failing);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 1);
}

TEST(FindRateTest, RejectsBadOptions) {
  auto never = [](double) -> absl::StatusOr<double> { return 0.0; };
  EXPECT_FALSE(FindRate({.start_rate = -1}, never).ok());
  EXPECT_FALSE(FindRate({.slo_ttft_ms = 0}, never).ok());
  EXPECT_FALSE(FindRate({.max_probes = 1}, never).ok());
}

}  // namespace
}  // namespace strata::server::bench
