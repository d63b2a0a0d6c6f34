// MetricsHistory: which samples it keeps, one value per time, how it forgets, and that its
// thread samples on its own; plus the exposer's extra pages it is served through.
#include "base/metrics_history.h"

#include <string>

#include "base/http_get.h"
#include "base/metrics_exposer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata::metrics {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

MetricsHistoryOptions Options(std::set<std::string> names, int max_points = 180) {
  MetricsHistoryOptions o;
  o.names = std::move(names);
  o.max_points = max_points;
  return o;
}

nlohmann::json History(const MetricsHistory& h) { return nlohmann::json::parse(h.ToJson()); }

TEST(MetricsHistoryTest, KeepsTheNamedSamplesAndAHistogramsBucketsSumAndCount) {
  Registry r;
  r.AddCounter("kept_total", "K.").WithLabels({{"tier", "host"}}).Increment(3);
  r.AddCounter("other_total", "O.").WithLabels({}).Increment(1);
  r.AddHistogram("latency_seconds", "L.", {0.5}).WithLabels({}).Observe(0.25);
  MetricsHistory h(&r, Options({"kept_total", "latency_seconds"}));
  h.Sample(kStart);
  nlohmann::json j = History(h);
  EXPECT_EQ(j["interval_seconds"], 5);
  EXPECT_EQ(j["times"], nlohmann::json::array({1'700'000'000.0}));
  EXPECT_EQ(j["series"]["kept_total{tier=\"host\"}"], nlohmann::json::array({3.0}));
  EXPECT_EQ(j["series"]["latency_seconds_bucket{le=\"0.5\"}"], nlohmann::json::array({1.0}));
  EXPECT_EQ(j["series"]["latency_seconds_bucket{le=\"+Inf\"}"], nlohmann::json::array({1.0}));
  EXPECT_EQ(j["series"]["latency_seconds_sum"], nlohmann::json::array({0.25}));
  EXPECT_EQ(j["series"]["latency_seconds_count"], nlohmann::json::array({1.0}));
  EXPECT_FALSE(j["series"].contains("other_total")) << j.dump();
}

TEST(MetricsHistoryTest, ASampleThatAppearsLaterIsNullBeforeIt) {
  Registry r;
  Family<Counter>& hits = r.AddCounter("hits_total", "H.");
  hits.WithLabels({{"tier", "host"}}).Increment(1);
  MetricsHistory h(&r, Options({"hits_total"}));
  h.Sample(kStart);
  hits.WithLabels({{"tier", "host"}}).Increment(1);
  hits.WithLabels({{"tier", "ssd"}}).Increment(5);
  h.Sample(kStart + absl::Seconds(5));
  nlohmann::json j = History(h);
  EXPECT_EQ(j["times"], nlohmann::json::array({1'700'000'000.0, 1'700'000'005.0}));
  EXPECT_EQ(j["series"]["hits_total{tier=\"host\"}"], nlohmann::json::array({1.0, 2.0}));
  EXPECT_EQ(j["series"]["hits_total{tier=\"ssd\"}"], nlohmann::json::array({nullptr, 5.0}));
}

TEST(MetricsHistoryTest, ForgetsThePointsPastMaxPoints) {
  Registry r;
  Gauge& g = r.AddGauge("level", "L.").WithLabels({});
  MetricsHistory h(&r, Options({"level"}, /*max_points=*/3));
  for (int i = 0; i < 5; ++i) {
    g.Set(i);
    h.Sample(kStart + absl::Seconds(i));
  }
  nlohmann::json j = History(h);
  EXPECT_EQ(j["times"], nlohmann::json::array({1'700'000'002.0, 1'700'000'003.0, 1'700'000'004.0}));
  EXPECT_EQ(j["series"]["level"], nlohmann::json::array({2.0, 3.0, 4.0}));
}

TEST(MetricsHistoryTest, SamplesOnItsOwnThreadUntilDestroyed) {
  Registry r;
  r.AddGauge("level", "L.").WithLabels({}).Set(7);
  MetricsHistoryOptions o = Options({"level"});
  o.interval = absl::Milliseconds(10);
  auto h = std::make_unique<MetricsHistory>(&r, o);
  h->StartSampling();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (History(*h)["times"].size() < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  nlohmann::json j = History(*h);
  ASSERT_GE(j["times"].size(), 3u) << j.dump();
  EXPECT_EQ(j["series"]["level"][0], 7.0);
  h.reset();  // joins the thread
}

TEST(MetricsHistoryTest, OptionsValidate) {
  EXPECT_TRUE(MetricsHistoryOptions{}.Validate().ok());
  MetricsHistoryOptions o;
  o.interval = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate()));
  o = {};
  o.max_points = 1;
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate()));
}

TEST(MetricsExposerTest, ServesItsPagesBesideMetricsAndNotFoundElsewhere) {
  Registry r;
  r.AddCounter("served_total", "S.").WithLabels({}).Increment(2);
  std::vector<HttpPage> pages;
  pages.push_back({"/", "text/html; charset=utf-8", [] { return std::string("<p>root</p>"); }});
  pages.push_back({"/status.json", "application/json", [] { return std::string("{\"ok\":1}"); }});
  pages.push_back({"/metrics", "text/plain", [] { return std::string("not the registry"); }});
  auto exposer = MetricsExposer::Start("127.0.0.1:0", &r, std::move(pages));
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();
  EXPECT_EQ(HttpGet("127.0.0.1", port, "/").value_or("failed"), "<p>root</p>");
  EXPECT_EQ(HttpGet("127.0.0.1", port, "/status.json").value_or("failed"), "{\"ok\":1}");
  EXPECT_NE(HttpGet("127.0.0.1", port, "/metrics").value_or("failed").find("served_total 2"), std::string::npos);
  EXPECT_FALSE(HttpGet("127.0.0.1", port, "/status.jsonx").ok());
  EXPECT_FALSE(HttpGet("127.0.0.1", port, "/other").ok());
}

}  // namespace
}  // namespace strata::metrics
