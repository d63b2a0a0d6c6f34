// The status page's server side: the page linked into the binary is the source file, and
// /status.json carries the numbers /metrics has and the history of what the page plots.
#include "server/status_page.h"

#include <fstream>
#include <sstream>
#include <string>

#include "base/http_get.h"
#include "base/metrics_exposer.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata::server {
namespace {

TEST(StatusPageTest, ServesTheHtmlOfTheSourceTree) {
  std::ifstream in(STRATA_SOURCE_DIR "/server/status_page.html");
  std::stringstream source;
  source << in.rdbuf();
  ASSERT_FALSE(source.str().empty());
  EXPECT_EQ(StatusPageHtml(), source.str());
}

TEST(StatusPageTest, StatusJsonHasTheNumbersOfMetricsAndTheHistory) {
  metrics::Registry r;
  r.AddGauge("strata_tier_bytes", "B.").WithLabels({{"tier", "host"}}).Set(4096);
  r.AddCounter("strata_cache_lookups_total", "L.").WithLabels({}).Increment(3);
  metrics::MetricsHistory history(&r, StatusHistoryOptions(absl::Seconds(5)));
  history.Sample(absl::FromUnixSeconds(100));
  auto exposer = metrics::MetricsExposer::Start("127.0.0.1:0", &r, StatusPages(&r, &history));
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();

  auto page = metrics::HttpGet("127.0.0.1", port, "/");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(*page, StatusPageHtml());

  auto body = metrics::HttpGet("127.0.0.1", port, "/status.json");
  ASSERT_TRUE(body.ok()) << body.status();
  nlohmann::json status = nlohmann::json::parse(*body);
  auto scraped = metrics::ParsePrometheusText(*metrics::HttpGet("127.0.0.1", port, "/metrics"));
  ASSERT_TRUE(scraped.ok()) << scraped.status();
  ASSERT_EQ(status["samples"].size(), scraped->size()) << status["samples"].dump();
  for (const auto& [key, value] : *scraped) EXPECT_EQ(status["samples"][key], value) << key;
  EXPECT_EQ(status["history"]["times"], nlohmann::json::array({100.0}));
  EXPECT_EQ(status["history"]["series"]["strata_cache_lookups_total"], nlohmann::json::array({3.0}));
  EXPECT_FALSE(status["history"]["series"].contains("strata_tier_bytes{tier=\"host\"}"))
      << "the history keeps only what the page plots";
}

}  // namespace
}  // namespace strata::server
