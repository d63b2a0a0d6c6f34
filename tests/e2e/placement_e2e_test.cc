// The simulator and the live server agree: a small multi-turn trace is replayed, one turn
// at a time, against a real `strata serve` with tiny tiers (SSD in a temp dir), and the
// tier each turn's session was found in (GetSession before the turn) must equal what
// placement_sim predicts for the same trace, capacities and policy.
#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model_config.h"
#include "gtest/gtest.h"
#include "storage/sim/placement_sim.h"
#include "storage/testing/temp_dir.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using storage::SimTier;

constexpr int kChunkTokens = 16;
constexpr int64_t kHostBlocks = 3;
constexpr int64_t kSsdBlocks = 6;

SimTier LiveTier(const std::string& target, const std::string& session) {
  auto info = testing::GetSessionInfo(target, session);
  if (absl::IsNotFound(info.status())) return SimTier::kNone;
  EXPECT_TRUE(info.ok()) << info.status();
  if (info.ok() && info->tier() == v1::TIER_HOST) return SimTier::kHost;
  if (info.ok() && info->tier() == v1::TIER_SSD) return SimTier::kSsd;
  return SimTier::kNone;
}

const char* Name(SimTier t) { return t == SimTier::kHost ? "host" : t == SimTier::kSsd ? "ssd" : "none"; }

void ReplayAndCompare(const std::string& policy_name) {
  SCOPED_TRACE(policy_name);
  auto policy = storage::ParsePlacementPolicy(policy_name);
  ASSERT_TRUE(policy.ok());
  const int64_t block_bytes =
      engine::Engine::ChunkLayoutFor(model::ModelConfig::Builtin(), kChunkTokens).BlockBytes();
  storage::testing::TempDir dir("strata-placement-e2e");
  auto server = testing::ServerProcess::Start(
      // Tier sizes are counted in the CPU backend's chunks (fp32 rows): the test pins it.
      {"--device=cpu", "--hbm_cache_bytes=0", "--chunk_tokens=" + std::to_string(kChunkTokens),
       "--host_cache_bytes=" + std::to_string(kHostBlocks * block_bytes),
       "--ssd_dirs=" + dir.path() + "/ssd", "--ssd_capacity_bytes=" + std::to_string(kSsdBlocks * block_bytes),
       "--placement=" + policy_name, "--fetch_or_recompute=false", "--pin_host_memory=false"});
  ASSERT_TRUE(server.ok()) << server.status();

  // Sessions grow by 5 new tokens and 4 answer tokens a turn: 1, then 2 blocks.
  const std::vector<std::string> order = {"A", "B", "C", "A", "D", "B", "E", "A", "C", "B", "D", "A", "E", "C"};
  absl::flat_hash_map<std::string, std::vector<int32_t>> history;
  storage::Trace trace;
  std::vector<SimTier> live;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& id = order[i];
    live.push_back(LiveTier((*server)->target(), id));
    std::vector<int32_t>& h = history[id];
    storage::TraceRequest r;
    r.arrival_ms = static_cast<double>(i);
    r.session_id = id;
    r.reusable_tokens = static_cast<int64_t>(h.size());
    for (int k = 0; k < 5; ++k) h.push_back(40 + static_cast<int32_t>((i * 7 + k) % 50));
    v1::ChatRequest req;
    req.set_session_id(id);
    req.set_max_new_tokens(4);
    req.set_persist(true);
    for (int32_t t : h) req.add_token_ids(t);
    testing::ChatTurn turn = testing::RunChat((*server)->target(), req);
    ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
    const std::vector<int32_t>& answer = turn.tokens;
    const v1::ChatDone& done = turn.done;
    ASSERT_TRUE(done.persisted()) << "turn " << i;
    r.context_tokens = static_cast<int64_t>(h.size());
    r.output_tokens = static_cast<int64_t>(answer.size());
    h.insert(h.end(), answer.begin(), answer.end());
    trace.requests.push_back(r);
  }
  trace.sessions = static_cast<int64_t>(history.size());

  storage::SimOptions o;
  o.policy = *policy;
  o.block_tokens = kChunkTokens;
  o.host_blocks = kHostBlocks;
  o.ssd_blocks = kSsdBlocks;
  o.sequential = true;
  o.fetch_or_recompute = false;
  storage::SimResult predicted = storage::Simulate(trace, o);
  int64_t hits = 0, ssd_hits = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(Name(live[i]), std::string(Name(predicted.outcomes[i].found)))
        << "turn " << i << " (session " << order[i] << "): live vs simulated tier";
    hits += live[i] != SimTier::kNone;
    ssd_hits += live[i] == SimTier::kSsd;
  }
  // The trace exercises every outcome: host hits, SSD hits and misses after eviction.
  EXPECT_GT(ssd_hits, 0);
  EXPECT_GT(hits, ssd_hits);
  EXPECT_GT(predicted.misses, 0);
}

TEST(PlacementE2eTest, LiveServerMatchesTheSimulatorUnderLru) { ReplayAndCompare("lru"); }
TEST(PlacementE2eTest, LiveServerMatchesTheSimulatorUnderFifo) { ReplayAndCompare("fifo"); }
TEST(PlacementE2eTest, LiveServerMatchesTheSimulatorUnderSchedulerAware) { ReplayAndCompare("scheduler-aware"); }

}  // namespace
}  // namespace strata
