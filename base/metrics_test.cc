#include "base/metrics.h"

#include <cmath>
#include <thread>

#include "base/http_get.h"
#include "base/metrics_exposer.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"

namespace strata::metrics {
namespace {

TEST(MetricsTest, CounterIncrementsAndSerializes) {
  Registry r;
  r.AddCounter("x_total", "Things.").WithLabels({{"kind", "a"}}).Increment(3);
  r.AddCounter("x_total", "ignored").WithLabels({{"kind", "a"}}).Increment();
  std::string text = r.Serialize();
  EXPECT_NE(text.find("# HELP x_total Things.\n# TYPE x_total counter\nx_total{kind=\"a\"} 4\n"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Registry r;
  Histogram& h = r.AddHistogram("lat_seconds", "Latency.", {0.1, 1}).WithLabels({});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  auto samples = ParsePrometheusText(r.Serialize());
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)["lat_seconds_bucket{le=\"0.1\"}"], 1);
  EXPECT_EQ((*samples)["lat_seconds_bucket{le=\"1\"}"], 2);
  EXPECT_EQ((*samples)["lat_seconds_bucket{le=\"+Inf\"}"], 3);
  EXPECT_EQ((*samples)["lat_seconds_count"], 3);
  EXPECT_DOUBLE_EQ((*samples)["lat_seconds_sum"], 5.55);
}

TEST(MetricsTest, LabelValuesAreEscapedAndParsedBack) {
  Registry r;
  r.AddGauge("g", "G.").WithLabels({{"v", "a\"b\\c\nd"}}).Set(-2.5);
  std::string text = r.Serialize();
  EXPECT_NE(text.find(R"(g{v="a\"b\\c\nd"} -2.5)"), std::string::npos) << text;
  auto samples = ParsePrometheusText(text);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(samples->count(R"(g{v="a\"b\\c\nd"})"), 1u);
}

TEST(MetricsTest, SameLabelsReturnSameChild) {
  Registry r;
  auto& f = r.AddCounter("c_total", "C.");
  EXPECT_EQ(&f.WithLabels({{"a", "1"}}), &f.WithLabels({{"a", "1"}}));
  EXPECT_NE(&f.WithLabels({{"a", "1"}}), &f.WithLabels({{"a", "2"}}));
}

TEST(MetricsTest, CollectorsRunBeforeSerialize) {
  Registry r;
  Gauge& g = r.AddGauge("live", "Live.").WithLabels({});
  int calls = 0;
  r.AddCollector([&] { g.Set(++calls); });
  EXPECT_NE(r.Serialize().find("live 1\n"), std::string::npos);
  EXPECT_NE(r.Serialize().find("live 2\n"), std::string::npos);
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  Registry r;
  Counter& c = r.AddCounter("n_total", "N.").WithLabels({});
  Histogram& h = r.AddHistogram("h", "H.", {1}).WithLabels({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), 40000);
  const prometheus::ClientMetric::Histogram collected = h.Collect().histogram;
  EXPECT_EQ(collected.sample_count, 40000u);
  EXPECT_EQ(collected.sample_sum, 20000);
}

TEST(MetricsTest, FormatsSpecialValues) {
  Registry r;
  auto& g = r.AddGauge("v", "V.");
  g.WithLabels({{"x", "int"}}).Set(3);
  g.WithLabels({{"x", "inf"}}).Set(1.0 / 0.0);
  g.WithLabels({{"x", "ninf"}}).Set(-1.0 / 0.0);
  g.WithLabels({{"x", "nan"}}).Set(0.0 / 0.0);
  g.WithLabels({{"x", "quarter"}}).Set(0.25);
  std::string text = r.Serialize();
  // Prometheus reads NaN in any case; prometheus-cpp writes "Nan".
  EXPECT_NE(text.find("v{x=\"inf\"} +Inf\nv{x=\"int\"} 3\nv{x=\"nan\"} Nan\nv{x=\"ninf\"} -Inf\n"
                      "v{x=\"quarter\"} 0.25\n"),
            std::string::npos)
      << text;
  auto samples = ParsePrometheusText(text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)["v{x=\"inf\"}"], 1.0 / 0.0);
  EXPECT_EQ((*samples)["v{x=\"ninf\"}"], -1.0 / 0.0);
  EXPECT_TRUE(std::isnan((*samples)["v{x=\"nan\"}"]));
}

TEST(MetricsTest, HelpIsEscapedAndSeriesSortedInRegistrationOrder) {
  Registry r;
  r.AddGauge("second", "Two\nlines \\ here.").WithLabels({{"b", "2"}, {"a", "1"}}).Set(1);
  r.AddCounter("first_total", "F.");  // no series: left out
  auto& again = r.AddGauge("second", "ignored");
  again.WithLabels({{"a", "0"}, {"b", "9"}}).Set(2);
  r.AddCounter("third_total", "T.").WithLabels({}).Increment();
  EXPECT_EQ(r.Serialize(),
            "# HELP second Two\\nlines \\\\ here.\n# TYPE second gauge\n"
            "second{a=\"0\",b=\"9\"} 2\nsecond{a=\"1\",b=\"2\"} 1\n"
            "# HELP third_total T.\n# TYPE third_total counter\nthird_total 1\n");
}

TEST(MetricsTest, ParserRejectsGarbageNamingTheLine) {
  auto bad = ParsePrometheusText("ok 1\n{oops} 2\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status();
}

TEST(MetricsExposerTest, ServesMetricsOverHttp) {
  Registry r;
  r.AddCounter("served_total", "S.").WithLabels({{"x", "y"}}).Increment(7);
  auto exposer = MetricsExposer::Start("127.0.0.1:0", &r);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  ASSERT_GT((*exposer)->port(), 0);
  auto body = HttpGet("127.0.0.1", (*exposer)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  auto samples = ParsePrometheusText(*body);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)["served_total{x=\"y\"}"], 7);
  EXPECT_FALSE(HttpGet("127.0.0.1", (*exposer)->port(), "/other").ok());
}

TEST(MetricsExposerTest, ReportsPortInUse) {
  Registry r;
  auto first = MetricsExposer::Start("127.0.0.1:0", &r);
  ASSERT_TRUE(first.ok());
  auto second = MetricsExposer::Start("127.0.0.1:" + std::to_string((*first)->port()), &r);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
}

}  // namespace
}  // namespace strata::metrics
