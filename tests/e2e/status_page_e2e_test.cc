// End-to-end: the status page on a real `strata serve`'s metrics port, opened in headless
// Chromium after a few chat turns of two tenants. The page must load with no network but
// the server's, show the numbers /metrics has (tiers, sessions, hits, turns, tenants, the
// version) and draw its plots from the history. A screenshot is kept in the build tree.
// Skipped when no chromium is installed.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/testing/temp_dir.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/headless_chromium.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::HeadlessChromium;
using testing::RunChat;
using testing::ServerProcess;

using Samples = std::map<std::string, double>;

// Small prompts and answers: the CPU model is slow, and the host tier reuses 16-token
// chunks. The page's history samples twice a second so that a short test has points.
const std::vector<std::string> kServeFlags = {"--device=cpu", "--pin_host_memory=false", "--chunk_tokens=16",
                                              "--status_sample_seconds=0.5"};

Samples Scrape(const ServerProcess& server) {
  auto body = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  if (!body.ok()) return {};
  auto samples = metrics::ParsePrometheusText(*body);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : Samples{};
}

// One turn of `session` under `api_key`: `history` and then `message`; returns the
// conversation with the answer appended.
std::vector<std::pair<std::string, std::string>> Turn(const ServerProcess& server, const std::string& api_key,
                                                      const std::string& session,
                                                      std::vector<std::pair<std::string, std::string>> history,
                                                      const std::string& message) {
  history.emplace_back("user", message);
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_max_new_tokens(8);
  for (const auto& [role, content] : history) {
    v1::Message* m = request.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  testing::ChatTurn turn = RunChat(server.target(), request, api_key);
  EXPECT_TRUE(turn.status.ok()) << session << ": " << turn.status.error_message();
  history.emplace_back("assistant", turn.text);
  return history;
}

std::string Unescape(std::string s) {
  return absl::StrReplaceAll(s, {{"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}});
}

// What the page shows for each sample it shows: key -> (data-value, text).
struct Shown {
  std::string value;
  std::string text;
};
std::map<std::string, Shown> ShownSamples(const std::string& dom) {
  std::map<std::string, Shown> out;
  static const std::regex kCell(R"re(<(td|dd)[^>]*? data-key="([^"]+)" data-value="([^"]*)"[^>]*>([^<]*)</)re");
  for (std::sregex_iterator it(dom.begin(), dom.end(), kCell), end; it != end; ++it) {
    out[Unescape((*it)[2])] = {(*it)[3], Unescape((*it)[4])};
  }
  return out;
}

// The text of the element with `id` (no children), or "" when there is none.
std::string TextOf(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("id=\"" + id + "\"[^>]*>([^<]*)<"))) return "";
  return Unescape(m[1]);
}

// The value of `attribute` on the element with `id`, or "" when there is none.
std::string AttributeOf(const std::string& dom, const std::string& id, const std::string& attribute) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("<[^>]* id=\"" + id + "\"[^>]*>"))) return "";
  std::string tag = m[0];
  if (!std::regex_search(tag, m, std::regex(" " + attribute + "=\"([^\"]*)\""))) return "";
  return Unescape(m[1]);
}

// A label of the one strata_build_info sample.
std::string BuildLabel(const Samples& samples, const std::string& label) {
  for (const auto& [key, value] : samples) {
    if (!key.starts_with("strata_build_info{")) continue;
    std::smatch m;
    if (std::regex_search(key, m, std::regex(label + "=\"([^\"]*)\""))) return m[1];
  }
  return "";
}

// The width and height in a PNG's IHDR; {0, 0} when the file is not a PNG.
std::pair<uint32_t, uint32_t> PngSize(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string head(24, '\0');
  f.read(head.data(), 24);
  if (!f || head.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || head.compare(12, 4, "IHDR") != 0) return {0, 0};
  auto be32 = [&](int at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(head[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

std::string OutputDir() {
  const std::string dir = STRATA_TEST_OUTPUT_DIR "/status_page_e2e";
  std::filesystem::create_directories(dir);
  return dir;
}

// The samples the page shows that a test compares: the idle server's, equal in two scrapes
// a second apart (a write-back or TTL sweep may still move the store's gauges).
Samples SettledScrape(const ServerProcess& server, const std::set<std::string>& keys) {
  Samples last = Scrape(server);
  for (int i = 0; i < 30; ++i) {
    absl::SleepFor(absl::Seconds(1));
    Samples now = Scrape(server);
    bool same = true;
    for (const std::string& k : keys) same = same && now.contains(k) && last.contains(k) && now[k] == last[k];
    if (same) return now;
    last = std::move(now);
  }
  ADD_FAILURE() << "the server's metrics did not settle";
  return last;
}

TEST(StatusPageE2eTest, ChromiumShowsWhatMetricsHasAndPlotsTheHistory) {
  auto chromium = HeadlessChromium::Find();
  if (!chromium.ok()) GTEST_SKIP() << "status page test skipped: " << chromium.status().message();
  const std::string dir = OutputDir();
  storage::testing::TempDir ssd("strata-status-page-ssd");
  std::vector<std::string> flags = kServeFlags;
  flags.insert(flags.end(), {"--api_keys=ka=acme,kg=globex", "--metrics_tenant_label", "--ssd_dirs=" + ssd.path(),
                             "--ssd_capacity_bytes=67108864", "--ssd_probe_bytes=0"});
  auto server = ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  ServerProcess& s = **server;

  // acme: one session over two turns (the second reuses the first); globex: one turn.
  auto acme = Turn(s, "ka", "page-acme", {}, "What does the status page show?");
  acme = Turn(s, "ka", "page-acme", acme, "And the plots?");
  Turn(s, "kg", "page-globex", {}, "Who uses the cache?");

  const std::set<std::string> compared = {
      "strata_tier_bytes{tier=\"host\"}",
      "strata_tier_capacity_bytes{tier=\"host\"}",
      "strata_tier_capacity_bytes{tier=\"ssd\"}",
      "strata_sessions{tier=\"host\"}",
      "strata_cache_lookups_total",
      "strata_cache_hits_total{tier=\"hbm\"}",
      "strata_cache_hits_total{tier=\"host\"}",
      "strata_generated_tokens_total",
      "strata_finished_turns_total{reason=\"length\"}",
      "strata_prefill_tokens_total{source=\"reused\"}",
      "strata_tenant_turns_total{tenant=\"acme\"}",
      "strata_tenant_turns_total{tenant=\"globex\"}",
      "strata_tenant_prompt_tokens_total{source=\"reused\",tenant=\"acme\"}",
      "strata_tenant_generated_tokens_total{tenant=\"globex\"}",
  };
  Samples metrics = SettledScrape(s, compared);
  ASSERT_EQ(metrics["strata_cache_lookups_total"], 3);
  ASSERT_GT(metrics["strata_cache_hits_total{tier=\"hbm\"}"] + metrics["strata_cache_hits_total{tier=\"host\"}"], 0);
  ASSERT_EQ(metrics["strata_tenant_turns_total{tenant=\"acme\"}"], 2);
  ASSERT_GT(metrics["strata_tier_bytes{tier=\"host\"}"], 0);

  const std::string url = absl::StrCat("http://127.0.0.1:", s.metrics_port(), "/");
  std::string dom;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a slow (sanitizer) server may miss the first poll
    auto got = chromium->DumpDom(url, absl::Seconds(5));
    ASSERT_TRUE(got.ok()) << got.status();
    dom = *got;
    if (dom.find("data-state=\"loaded\"") != std::string::npos) break;
  }
  std::ofstream(dir + "/status_page.dom.html") << dom;
  ASSERT_NE(dom.find("data-state=\"loaded\""), std::string::npos)
      << "the page never rendered /status.json; chromium said:\n"
      << chromium->last_stderr() << "\nDOM in " << dir << "/status_page.dom.html";
  EXPECT_EQ(chromium->last_stderr().find("Uncaught"), std::string::npos) << chromium->last_stderr();

  // The numbers: the settled server's /metrics, on the page as data and as text.
  const std::map<std::string, Shown> shown = ShownSamples(dom);
  for (const std::string& key : compared) {
    auto it = shown.find(key);
    ASSERT_NE(it, shown.end()) << key << " is not on the page; DOM in " << dir << "/status_page.dom.html";
    EXPECT_EQ(std::stod(it->second.value), metrics[key]) << key;
    if (key.starts_with("strata_tier_")) {
      EXPECT_TRUE(it->second.text.ends_with("B")) << key << " shows '" << it->second.text << "'";
    } else {
      EXPECT_EQ(it->second.text, absl::StrCat(static_cast<int64_t>(metrics[key]))) << key;
    }
  }
  EXPECT_EQ(TextOf(dom, "version"), BuildLabel(metrics, "version"));
  EXPECT_EQ(TextOf(dom, "commit"), BuildLabel(metrics, "commit"));
  EXPECT_EQ(TextOf(dom, "device"), "cpu");
  EXPECT_FALSE(BuildLabel(metrics, "version").empty());
  EXPECT_EQ(metrics["strata_ssd_degraded"], 0);
  EXPECT_EQ(TextOf(dom, "ssd-state"), "healthy");
  EXPECT_NE(dom.find("data-tenant=\"acme\""), std::string::npos);
  EXPECT_NE(dom.find("data-tenant=\"globex\""), std::string::npos);

  // The plots: points drawn from the server's history of the turns above.
  for (const char* plot : {"plot-hit_rate", "plot-ttft", "plot-tokens"}) {
    const std::string points = AttributeOf(dom, plot, "data-points");
    ASSERT_FALSE(points.empty()) << plot << " drew nothing";
    EXPECT_GE(std::stoi(points), 2) << plot;
  }
  EXPECT_NE(dom.find("<polyline"), std::string::npos);

  const std::string png = dir + "/status_page.png";
  std::filesystem::remove(png);
  ASSERT_TRUE(chromium->Screenshot(url, absl::Seconds(5), 1280, 1000, png).ok()) << chromium->last_stderr();
  EXPECT_EQ(PngSize(png), std::make_pair(1280u, 1000u));
  std::printf("status page screenshot: %s\nits DOM: %s/status_page.dom.html\n", png.c_str(), dir.c_str());
  EXPECT_EQ(s.Stop(), 0) << "clean exit (and, in sanitizer trees, nothing found)";
}

// Per-tenant series only with --metrics_tenant_label: a default server counts the same
// turns without them, in /metrics and in what the status page reads.
TEST(StatusPageE2eTest, TenantSeriesOnlyWithTheFlag) {
  std::vector<std::string> flags = kServeFlags;
  flags.push_back("--api_keys=ka=acme");
  auto server = ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  Turn(**server, "ka", "no-tenant-label", {}, "Is my tenant a label?");
  const std::string exposition = metrics::HttpGet("127.0.0.1", (*server)->metrics_port(), "/metrics").value_or("");
  EXPECT_EQ(exposition.find("strata_tenant_"), std::string::npos);
  EXPECT_EQ(exposition.find("acme"), std::string::npos);
  EXPECT_EQ(Scrape(**server)["strata_finished_turns_total{reason=\"length\"}"], 1);
  auto status = metrics::HttpGet("127.0.0.1", (*server)->metrics_port(), "/status.json");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->find("strata_tenant_"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(*status)["samples"]["strata_finished_turns_total{reason=\"length\"}"], 1);
  EXPECT_EQ((*server)->Stop(), 0);
}

}  // namespace
}  // namespace strata
