#include "storage/sim/placement_sim.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

// A trace of small turns (10 new tokens, 5 generated: every session stays one block).
// `turns` lists (arrival ms, session) in order.
Trace SmallTurns(const std::vector<std::pair<double, std::string>>& turns) {
  Trace t;
  absl::flat_hash_map<std::string, int64_t> held;
  for (const auto& [ms, id] : turns) {
    TraceRequest r;
    r.arrival_ms = ms;
    r.session_id = id;
    auto it = held.find(id);
    r.reusable_tokens = it == held.end() ? 0 : it->second;
    r.context_tokens = r.reusable_tokens + 10;
    r.output_tokens = 5;
    held[id] = r.context_tokens + r.output_tokens;
    t.requests.push_back(r);
  }
  t.sessions = static_cast<int64_t>(held.size());
  return t;
}

std::vector<SimTier> Found(const SimResult& r) {
  std::vector<SimTier> out;
  for (const SimRequestOutcome& o : r.outcomes) out.push_back(o.found);
  return out;
}

SimOptions Sequential(PlacementPolicy policy, int64_t host_blocks, int64_t ssd_blocks) {
  SimOptions o;
  o.policy = policy;
  o.host_blocks = host_blocks;
  o.ssd_blocks = ssd_blocks;
  o.sequential = true;
  o.fetch_or_recompute = false;
  return o;
}

constexpr SimTier N = SimTier::kNone, H = SimTier::kHost, S = SimTier::kSsd;

TEST(PlacementSimTest, BeladyBeatsLruAndFifoOnTheClassicLoop) {
  // A B C A B C with room for two sessions and no SSD.
  Trace t = SmallTurns({{0, "A"}, {1, "B"}, {2, "C"}, {3, "A"}, {4, "B"}, {5, "C"}});
  EXPECT_EQ(Found(Simulate(t, Sequential(PlacementPolicy::kLru, 2, 0))), (std::vector<SimTier>{N, N, N, N, N, N}));
  EXPECT_EQ(Found(Simulate(t, Sequential(PlacementPolicy::kFifo, 2, 0))), (std::vector<SimTier>{N, N, N, N, N, N}));
  // Belady keeps A at C's save (B is needed later), then keeps C at B's save (A is never used again).
  SimResult b = Simulate(t, Sequential(PlacementPolicy::kBelady, 2, 0));
  EXPECT_EQ(Found(b), (std::vector<SimTier>{N, N, N, H, N, H}));
  EXPECT_EQ(b.reusable_requests, 3);
  EXPECT_EQ(b.hits_host, 2);
  EXPECT_EQ(b.misses, 1);
}

TEST(PlacementSimTest, LruAndFifoDifferWhereRecencyAndAgeDisagree) {
  // A B A C A B, room for two: LRU evicts B for C; FIFO evicts A (stored first).
  Trace t = SmallTurns({{0, "A"}, {1, "B"}, {2, "A"}, {3, "C"}, {4, "A"}, {5, "B"}});
  EXPECT_EQ(Found(Simulate(t, Sequential(PlacementPolicy::kLru, 2, 0))), (std::vector<SimTier>{N, N, H, N, H, N}));
  EXPECT_EQ(Found(Simulate(t, Sequential(PlacementPolicy::kFifo, 2, 0))), (std::vector<SimTier>{N, N, H, N, N, N}));
}

TEST(PlacementSimTest, DemotedSessionsAreSsdHitsAndEvictionNeedsAFullSsd) {
  // Host for one session, SSD for two: A B A → A comes back from SSD.
  Trace t = SmallTurns({{0, "A"}, {1, "B"}, {2, "A"}, {3, "C"}, {4, "B"}});
  SimResult r = Simulate(t, Sequential(PlacementPolicy::kLru, 1, 2));
  EXPECT_EQ(Found(r), (std::vector<SimTier>{N, N, S, N, N}));
  // A's rewrite (turn 3) needs a new SSD block while its old copy is still held: B, held
  // only on SSD, leaves the store; B's rewrite (turn 5) pushes out A the same way.
  EXPECT_EQ(r.evictions, 2);
  EXPECT_GT(r.bytes_ssd_to_host, 0);
  EXPECT_EQ(r.bytes_host_to_ssd, 5 * SimOptions().block_tokens * SimOptions().kv_bytes_per_token);
}

TEST(PlacementSimTest, SchedulerAwareNeverEvictsQueuedSessions) {
  // One slot, 100 ms per turn: the second turns of A, B, C queue up behind the first ones.
  Trace t = SmallTurns({{0, "A"}, {0, "B"}, {0, "C"}, {1, "A"}, {1, "B"}, {1, "C"}});
  SimOptions o;
  o.host_blocks = 2;
  o.ssd_blocks = 0;
  o.slots = 1;
  o.decode_ms_per_token = 20;
  o.policy = PlacementPolicy::kLru;
  SimResult lru = Simulate(t, o);
  EXPECT_EQ(Found(lru), (std::vector<SimTier>{N, N, N, N, N, N}));
  o.policy = PlacementPolicy::kSchedulerAware;
  SimResult sa = Simulate(t, o);
  // When C's first turn ends, A and B are queued (within the eviction window): C's save
  // is the one that gives way, and A and B hit.
  EXPECT_EQ(Found(sa), (std::vector<SimTier>{N, N, N, H, H, N}));
}

TEST(PlacementSimTest, PrefetchBringsQueuedSessionsUpInTime) {
  // Host for one session, SSD for all. A and B alternate; with one slot and long turns,
  // the next turn is always queued while the current one runs, so scheduler-aware has
  // it on host before its turn; LRU loads it from SSD on admission.
  std::vector<std::pair<double, std::string>> turns;
  for (int i = 0; i < 6; ++i) {
    turns.push_back({i * 1.0, "A"});
    turns.push_back({i * 1.0, "B"});
  }
  Trace t = SmallTurns(turns);
  SimOptions o;
  o.host_blocks = 2;
  o.ssd_blocks = 8;
  o.slots = 1;
  o.fetch_or_recompute = false;
  o.policy = PlacementPolicy::kLru;
  SimResult lru = Simulate(t, o);
  o.policy = PlacementPolicy::kSchedulerAware;
  SimResult sa = Simulate(t, o);
  EXPECT_EQ(sa.hits_host + sa.hits_ssd, lru.hits_host + lru.hits_ssd);
  EXPECT_GE(sa.hits_host, lru.hits_host);
  EXPECT_EQ(sa.prefetch_late, 0);
}

TEST(PlacementSimTest, FetchOrRecomputeTakesTheFasterPath) {
  Trace t = SmallTurns({{0, "A"}, {1, "B"}, {2, "A"}});
  SimOptions o = Sequential(PlacementPolicy::kLru, 1, 4);
  o.fetch_or_recompute = true;
  // A 256-token block of 128 KiB per token is 32 MiB: at 3 GB/s ~11 ms, and A holds 15
  // tokens, recomputed in 1.4 ms at 10K tokens/s: recompute wins.
  SimResult r = Simulate(t, o);
  EXPECT_EQ(r.outcomes[2].found, SimTier::kSsd);
  EXPECT_TRUE(r.outcomes[2].recomputed);
  EXPECT_EQ(r.outcomes[2].reused_tokens, 0);
  // With a fast SSD, loading wins.
  o.ssd_read_bytes_per_s = 1e12;
  r = Simulate(t, o);
  EXPECT_FALSE(r.outcomes[2].recomputed);
  EXPECT_EQ(r.outcomes[2].reused_tokens, 14);  // the last answer token was never fed back
}

TEST(PlacementSimTest, WorkingSetCountsEachSessionAtItsLargest) {
  Trace t = SmallTurns({{0, "A"}, {1, "A"}, {2, "B"}});
  EXPECT_EQ(WorkingSetBlocks(t, 256), 2);
  EXPECT_EQ(WorkingSetBlocks(t, 16), 2 + 1);  // A reaches 29 tokens: 2 blocks of 16
}

}  // namespace
}  // namespace strata::storage
