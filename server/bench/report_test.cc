#include "server/bench/report.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace strata::server::bench {
namespace {

TEST(LatencyStatsTest, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  LatencyStats s = ComputeLatencyStats(v);
  EXPECT_EQ(s.count, 100);
  EXPECT_EQ(s.p50, 50);
  EXPECT_EQ(s.p90, 90);
  EXPECT_EQ(s.p99, 99);
  EXPECT_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_EQ(ComputeLatencyStats({}).count, 0);
  EXPECT_EQ(ComputeLatencyStats({7}).p99, 7);
}

TEST(SummarizeTest, CountsErrorsByCodeAndReuseOfSuccessfulTurnsOnly) {
  RunResult r;
  r.wall_s = 2;
  r.turns.push_back({.measured = true, .ttft_ms = 10, .e2e_ms = 30, .inter_token_ms = {5, 5},
                     .server_ttft_ms = 8, .prompt_tokens = 100, .cached_tokens = 0, .computed_tokens = 100,
                     .completion_tokens = 3, .tier = 0});
  r.turns.push_back({.measured = true, .ttft_ms = 4, .e2e_ms = 20, .inter_token_ms = {6},
                     .server_ttft_ms = 3, .prompt_tokens = 150, .cached_tokens = 102, .computed_tokens = 48,
                     .completion_tokens = 2, .tier = 2});
  r.turns.push_back({.measured = false, .ttft_ms = 1000, .e2e_ms = 1000, .prompt_tokens = 10, .computed_tokens = 10,
                     .completion_tokens = 1});
  r.turns.push_back({.status_code = 14, .error = "connection refused", .e2e_ms = 1});
  r.not_sent_turns = 2;
  RunSummary s = Summarize("x", r, std::nullopt);
  EXPECT_EQ(s.turns_ok, 3);
  EXPECT_EQ(s.turns_failed, 1);
  EXPECT_EQ(s.turns_not_sent, 2);
  EXPECT_EQ(s.errors_by_code.at("unavailable"), 1);
  EXPECT_EQ(s.cached_tokens, 102);
  EXPECT_EQ(s.computed_tokens, 158) << "unmeasured turns still count in the token totals";
  EXPECT_EQ(s.hits_by_tier.at("host"), 1);
  EXPECT_EQ(s.Hits(), 1);
  EXPECT_EQ(s.ttft_client_ms.count, 2) << "only measured successful turns have latencies";
  EXPECT_EQ(s.ttft_client_ms.max, 10);
  EXPECT_EQ(s.inter_token_ms.count, 3);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1.5);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 3.0);
  nlohmann::json j = SummaryToJson(s);
  EXPECT_EQ(j["errors_by_code"]["unavailable"], 1);
  EXPECT_EQ(j["cached_tokens"], 102);
  EXPECT_FALSE(j.contains("metrics"));
}

TEST(CountersBetweenTest, SubtractsAndSplitsLabels) {
  MetricsSample before = {{"strata_prefill_tokens_total{source=\"reused\"}", 10},
                          {"strata_cache_hits_total{tier=\"host\"}", 1},
                          {"strata_requests_total{code=\"ok\",method=\"strata.v1.ChatService/Chat\"}", 4}};
  MetricsSample after = {{"strata_prefill_tokens_total{source=\"reused\"}", 35},
                         {"strata_prefill_tokens_total{source=\"computed\"}", 50},
                         {"strata_cache_hits_total{tier=\"host\"}", 3},
                         {"strata_cache_hits_total{tier=\"ssd\"}", 0},
                         {"strata_requests_total{code=\"ok\",method=\"strata.v1.ChatService/Chat\"}", 9},
                         {"strata_requests_total{code=\"not_found\",method=\"strata.v1.ChatService/Chat\"}", 0},
                         {"strata_requests_total{code=\"ok\",method=\"grpc.health.v1.Health/Check\"}", 7},
                         {"strata_system_prompt_hits_total", 12},
                         {"strata_kv_transfer_bytes_total{direction=\"load\"}", 3000},
                         {"strata_kv_transfer_bytes_total{direction=\"save\"}", 500},
                         {"strata_kv_load_stall_seconds_total", 0.25},
                         {"strata_queue_seconds_sum", 1.5},
                         {"strata_tier_bytes{tier=\"host\"}", 4096},
                         {"strata_sessions{tier=\"host\"}", 2},
                         {"strata_step_seconds_count{kind=\"decode\"}", 30},
                         {"strata_step_seconds_sum{kind=\"decode\"}", 0.6},
                         {"strata_step_seconds_count{kind=\"mixed\"}", 4},
                         {"strata_engine_thread_seconds_total{part=\"forward\"}", 2.5},
                         {"strata_engine_thread_seconds_total{part=\"emit\"}", 0.25}};
  before["strata_system_prompt_hits_total"] = 2;
  before["strata_kv_transfer_bytes_total{direction=\"load\"}"] = 1000;
  before["strata_queue_seconds_sum"] = 0.5;
  before["strata_tier_bytes{tier=\"host\"}"] = 1024;
  before["strata_step_seconds_count{kind=\"decode\"}"] = 10;
  before["strata_step_seconds_sum{kind=\"decode\"}"] = 0.2;
  before["strata_engine_thread_seconds_total{part=\"forward\"}"] = 0.5;
  ServerCounters c = CountersBetween(before, after);
  EXPECT_EQ(c.system_prompt_hits, 10);
  EXPECT_EQ(c.kv_load_bytes, 2000);
  EXPECT_EQ(c.kv_save_bytes, 500) << "missing before: counted from 0";
  EXPECT_EQ(c.kv_load_stall_s, 0.25);
  EXPECT_EQ(c.queue_sum_s, 1.0);
  EXPECT_EQ(c.host_bytes, 4096) << "a gauge: its value at the end, not a delta";
  EXPECT_EQ(c.host_sessions, 2);
  EXPECT_EQ(c.prefill_reused_tokens, 25);
  EXPECT_EQ(c.prefill_computed_tokens, 50);
  EXPECT_EQ(c.hits_by_tier.at("host"), 2);
  EXPECT_EQ(c.hits_by_tier.at("ssd"), 0);
  EXPECT_EQ(c.requests_by_code.at("ok"), 5) << "only the Chat calls count";
  EXPECT_EQ(c.requests_by_code.count("not_found"), 0u) << "codes that did not move are left out";
  EXPECT_EQ(c.steps_by_kind.at("decode"), 20);
  EXPECT_NEAR(c.step_seconds_by_kind.at("decode"), 0.4, 1e-12);
  EXPECT_EQ(c.steps_by_kind.at("mixed"), 4);
  EXPECT_NEAR(c.engine_seconds_by_part.at("forward"), 2.0, 1e-12);
  EXPECT_NEAR(c.engine_seconds_by_part.at("emit"), 0.25, 1e-12);
  EXPECT_EQ(c.engine_seconds_by_part.count("idle"), 0u) << "a part the server did not export";
}

// The server's steps by kind, as the summary prints them (mean milliseconds a step) and the
// JSON keeps them; kinds without steps are left out. The engine thread's parts likewise.
TEST(PrintSummaryTest, PrintsTheServersStepsByKindAndItsEngineThread) {
  RunSummary s;
  s.label = "strata";
  ServerCounters c;
  c.steps_by_kind = {{"decode", 20}, {"mixed", 4}, {"prefill", 0}};
  c.step_seconds_by_kind = {{"decode", 0.4}, {"mixed", 0.1}};
  c.engine_seconds_by_part = {{"forward", 0.5}, {"emit", 0.012}, {"idle", 0.3}};
  s.server = c;
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  PrintSummary(out, s);
  std::fclose(out);
  const std::string printed(text, size);
  std::free(text);
  EXPECT_NE(printed.find("server steps (mean time): decode 20 x 20.00 ms, mixed 4 x 25.00 ms\n"), std::string::npos)
      << printed;
  EXPECT_EQ(printed.find("prefill 0 x"), std::string::npos) << printed;
  // Per step over all 24 steps, in the order the thread's loop runs them.
  EXPECT_NE(printed.find("server engine thread (ms a step): forward 20.833, emit 0.500, idle 12.500\n"),
            std::string::npos)
      << printed;
  const nlohmann::json j = SummaryToJson(s);
  EXPECT_EQ(j["metrics"]["steps_by_kind"]["decode"], 20);
  EXPECT_EQ(j["metrics"]["step_seconds_by_kind"]["mixed"], 0.1);
  EXPECT_EQ(j["metrics"]["engine_seconds_by_part"]["emit"], 0.012);
}

}  // namespace
}  // namespace strata::server::bench
