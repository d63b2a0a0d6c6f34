// Tenants share one deployment fairly, end to end: a real `strata serve` with two API-key
// tenants, a host quota per tenant (--tenant_host_quota_bytes) and a cap on each tenant's
// queued turns (--max_queued_per_tenant). Tenant alpha floods the server with new sessions
// from many threads; tenant beta's sessions all stay cached (their next turns, sent during
// the flood, are served from the host tier) and beta's turns wait behind at most the cap of
// alpha's queued turns, while alpha's excess turns get RESOURCE_EXHAUSTED naming the limit.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/http_get.h"
#include "gtest/gtest.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ChatTurn;
using testing::RunChat;
using testing::ServerProcess;

// random:builtin's KV in 16-token chunks on the CPU backend (checked below through Stats).
constexpr int kChunkTokens = 16;
constexpr int64_t kChunkBytes = 69632;
constexpr int64_t kHostChunks = 32;
constexpr int64_t kQuotaChunks = 16;  // each tenant: half the host tier
constexpr int kQueueCap = 2;          // --max_queued_per_tenant
constexpr int kMaxBatch = 4;
constexpr int kPromptTokens = 40;  // + 8 generated: 47 tokens stored, 3 chunks
constexpr int kNewTokens = 8;
constexpr int kBetaSessions = 3;
constexpr int kFloodThreads = 12;

v1::ChatRequest Request(const std::string& session, const std::vector<int32_t>& tokens) {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(kNewTokens);
  for (int32_t t : tokens) r.add_token_ids(t);
  return r;
}

std::vector<int32_t> Prompt(int seed) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < kPromptTokens; ++i) tokens.push_back(32 + (seed * 7 + i * 13) % 90);
  return tokens;
}

v1::TierStats HostStats(const std::string& target, const std::string& key, v1::StatsResponse* all = nullptr) {
  auto stub = v1::CacheService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + key);
  v1::StatsResponse r;
  const grpc::Status s = stub->Stats(&ctx, v1::StatsRequest(), &r);
  EXPECT_TRUE(s.ok()) << s.error_message();
  if (all != nullptr) *all = r;
  for (const v1::TierStats& t : r.tiers()) {
    if (t.tier() == v1::TIER_HOST) return t;
  }
  return v1::TierStats();
}

// A sample of one unlabelled series of /metrics (-1 when absent).
double Metric(int metrics_port, const std::string& series) {
  auto body = metrics::HttpGet("127.0.0.1", metrics_port, "/metrics");
  if (!body.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*body, '\n')) {
    if (!absl::ConsumePrefix(&line, series + " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

TEST(TenantQuotaE2eTest, OneTenantsFloodNeitherEvictsNorDelaysAnothersSessions) {
  auto server = ServerProcess::Start(
      {"--device=cpu", "--api_keys=ka=alpha,kb=beta", "--pin_host_memory=false",
       absl::StrCat("--chunk_tokens=", kChunkTokens), absl::StrCat("--host_cache_bytes=", kHostChunks * kChunkBytes),
       absl::StrCat("--tenant_host_quota_bytes=", kQuotaChunks * kChunkBytes),
       "--hbm_cache_bytes=0",  // every hit below is the host tier's
       absl::StrCat("--max_queued_per_tenant=", kQueueCap), absl::StrCat("--max_batch=", kMaxBatch)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->target();

  // Beta's sessions, first turns.
  std::vector<std::vector<int32_t>> beta_history;
  for (int i = 0; i < kBetaSessions; ++i) {
    std::vector<int32_t> prompt = Prompt(1000 + i);
    ChatTurn first = RunChat(target, Request("beta-" + std::to_string(i), prompt), "kb");
    ASSERT_TRUE(first.status.ok()) << first.status.error_message();
    ASSERT_EQ(first.tokens.size(), static_cast<size_t>(kNewTokens));
    prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());
    beta_history.push_back(prompt);
  }
  const v1::TierStats beta_before = HostStats(target, "kb");
  ASSERT_EQ(beta_before.quota_bytes(), static_cast<uint64_t>(kQuotaChunks * kChunkBytes));
  ASSERT_EQ(beta_before.used_bytes(), static_cast<uint64_t>(kBetaSessions * 3 * kChunkBytes))
      << "the chunk size this test assumes (" << kChunkBytes << " bytes) is not the model's";

  // Alpha floods: new sessions from many threads, as fast as the server takes them.
  std::atomic<bool> stop{false};
  std::atomic<int> alpha_done{0}, alpha_refused{0}, alpha_failed{0};
  std::mutex mu;
  std::vector<double> alpha_turn_ms;  // guarded by mu
  std::string refusal;                // guarded by mu: a refusal's message
  std::vector<std::thread> flood;
  for (int t = 0; t < kFloodThreads; ++t) {
    flood.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const absl::Time start = absl::Now();
        ChatTurn turn = RunChat(target, Request(absl::StrCat("alpha-", t, "-", i), Prompt(t * 1000 + i)), "ka");
        if (turn.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ++alpha_refused;
          {
            std::lock_guard<std::mutex> lock(mu);
            refusal = turn.status.error_message();
          }
          absl::SleepFor(absl::Milliseconds(20));
          continue;
        }
        if (!turn.status.ok()) {
          ++alpha_failed;
          continue;
        }
        ++alpha_done;
        std::lock_guard<std::mutex> lock(mu);
        alpha_turn_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
      }
    });
  }
  // The queue never holds more than the cap of alpha's turns (and beta's one).
  std::atomic<double> max_queue{0};
  std::thread queue_watch([&] {
    while (!stop.load()) {
      const double q = Metric((*server)->metrics_port(), "strata_queue_depth");
      if (q > max_queue.load()) max_queue.store(q);
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  // Alpha stores far more than the host tier holds before beta comes back.
  const int kAlphaTurnsFirst = 2 * kHostChunks / 3;
  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  while (alpha_done.load() < kAlphaTurnsFirst && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_GE(alpha_done.load(), kAlphaTurnsFirst) << "the flood did not get going";

  // Beta's next turns, during the flood: each finds its whole session on host.
  std::vector<double> beta_ttft_ms;
  for (int i = 0; i < kBetaSessions; ++i) {
    std::vector<int32_t> prompt = beta_history[i];
    for (int k = 0; k < 4; ++k) prompt.push_back(40 + k);
    ChatTurn next = RunChat(target, Request("beta-" + std::to_string(i), prompt), "kb");
    ASSERT_TRUE(next.status.ok()) << "beta refused during alpha's flood: " << next.status.error_message();
    EXPECT_EQ(next.done.cache_tier(), v1::TIER_HOST) << "beta-" << i << " lost its cache to alpha's flood";
    EXPECT_EQ(next.done.usage().cached_tokens(), static_cast<uint32_t>(kPromptTokens + kNewTokens - 1)) << "beta-" << i;
    beta_ttft_ms.push_back(next.done.ttft_ms());
  }
  const int alpha_turns_during_beta = alpha_done.load();
  stop.store(true);
  for (std::thread& t : flood) t.join();
  queue_watch.join();

  EXPECT_GT(alpha_turns_during_beta, kAlphaTurnsFirst) << "the flood went on while beta's turns ran";
  EXPECT_EQ(alpha_failed.load(), 0);
  ASSERT_GT(alpha_refused.load(), 0) << "the flood never met its queue cap";
  EXPECT_NE(refusal.find("max_queued_per_tenant"), std::string::npos) << refusal;
  // Beta's turns waited behind at most the cap of alpha's: the queue (sampled every 10 ms)
  // never held more (without the cap it holds the flood: 9 here), and beta's time to first
  // token stayed below two of alpha's slowest whole turns.
  EXPECT_LE(max_queue.load(), kQueueCap + 1) << "more of alpha's turns were queued than its cap";
  const double alpha_slowest = *std::max_element(alpha_turn_ms.begin(), alpha_turn_ms.end());
  std::printf("alpha: %d turns (slowest %.0f ms), %d refused; queue at most %.0f; beta's TTFT during the flood:",
              alpha_done.load(), alpha_slowest, alpha_refused.load(), max_queue.load());
  for (double ttft : beta_ttft_ms) std::printf(" %.0f ms", ttft);
  std::printf("\n");
  for (double ttft : beta_ttft_ms) EXPECT_LT(ttft, 2 * alpha_slowest) << "alpha's slowest turn: " << alpha_slowest;

  // Alpha's quota held it, by evicting its own sessions; beta's were never touched.
  v1::StatsResponse alpha_stats, beta_stats;
  const v1::TierStats alpha_host = HostStats(target, "ka", &alpha_stats);
  const v1::TierStats beta_host = HostStats(target, "kb", &beta_stats);
  EXPECT_LE(alpha_host.used_bytes(), static_cast<uint64_t>(kQuotaChunks * kChunkBytes));
  EXPECT_GT(alpha_stats.quota_evictions(), 0u);
  EXPECT_EQ(beta_stats.evictions(), 0u);
  EXPECT_EQ(beta_stats.quota_evictions(), 0u);
  EXPECT_EQ(beta_host.sessions(), static_cast<uint32_t>(kBetaSessions));
  EXPECT_EQ(Metric((*server)->metrics_port(), "strata_cache_evictions_total{reason=\"host_full\"}"), 0);
  EXPECT_GT(Metric((*server)->metrics_port(), "strata_cache_quota_evictions_total{tier=\"host\"}"), 0);
  EXPECT_EQ((*server)->Stop() >> 8, 0);
}

}  // namespace
}  // namespace strata
