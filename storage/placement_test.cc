#include "storage/placement.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

std::vector<std::string> Keys(const std::vector<PlacementCandidate>& c) {
  std::vector<std::string> out;
  for (const PlacementCandidate& x : c) out.emplace_back(x.key);
  return out;
}

// a: oldest use, first inserted ... d: newest use; insertion order differs from use order.
std::vector<PlacementCandidate> Four() {
  return {{"a", 1, 3}, {"b", 2, 1}, {"c", 3, 4}, {"d", 4, 2}};
}

TEST(PlacementTest, ParsesEveryPolicyByName) {
  for (PlacementPolicy p : {PlacementPolicy::kSchedulerAware, PlacementPolicy::kLru, PlacementPolicy::kFifo,
                            PlacementPolicy::kBelady}) {
    auto parsed = ParsePlacementPolicy(PlacementPolicyName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  auto bad = ParsePlacementPolicy("random");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("scheduler-aware"), std::string::npos);
}

TEST(PlacementTest, LruFifoAndBeladyOrderVictims) {
  auto c = Four();
  Placement lru(PlacementPolicy::kLru);
  lru.OrderVictims(c, RoomFor::kHost);
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"a", "b", "c", "d"}));
  c = Four();
  Placement fifo(PlacementPolicy::kFifo);
  fifo.OrderVictims(c, RoomFor::kLeaveStore);
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"b", "d", "a", "c"}));
  c = Four();
  Placement belady(PlacementPolicy::kBelady);
  // Next uses: c at 10, a at 20, b never, d at 15.
  belady.SetOracle([](absl::string_view k) -> uint64_t {
    if (k == "c") return 10;
    if (k == "a") return 20;
    if (k == "d") return 15;
    return kNeverUsedAgain;
  });
  belady.OrderVictims(c, RoomFor::kHost);
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"b", "a", "d", "c"}));
  // No policy but scheduler-aware protects anything or prefetches.
  lru.SetQueue({"a"});
  EXPECT_TRUE(lru.MayLeaveStore("a"));
  EXPECT_TRUE(lru.PrefetchOrder([](const std::string&) { return true; }).empty());
}

TEST(PlacementTest, SchedulerAwareDemotesOutsideTheLookAheadFirstAndTheQueueFromTheBack) {
  Placement p(PlacementPolicy::kSchedulerAware);
  p.SetQueue({"c", "a"});  // c runs next, then a
  p.Hint("d");
  auto c = Four();
  p.OrderVictims(c, RoomFor::kHost);
  // b: outside the look-ahead; d: hinted; then the queue from the back: a, then c.
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"b", "d", "a", "c"}));
  // Room for a prefetch comes only from outside the look-ahead.
  c = Four();
  p.OrderVictims(c, RoomFor::kHostPrefetch);
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"b"}));
  // Once used, a hint no longer protects.
  p.Used("d");
  c = Four();
  p.OrderVictims(c, RoomFor::kHostPrefetch);
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"b", "d"}));
}

TEST(PlacementTest, QueuedSessionsWithinTheEvictionWindowNeverLeaveTheStore) {
  Placement p(PlacementPolicy::kSchedulerAware);
  p.SetQueue({"a", "b", "c", "d"});
  // (host 4 + SSD 4 blocks) / 4 blocks per session = a window of 2 sessions.
  p.SetCapacity(/*host_free_blocks=*/0, /*host_capacity_blocks=*/4, /*ssd_capacity_blocks=*/4, 4.0);
  EXPECT_EQ(p.eviction_window(), 2);
  EXPECT_FALSE(p.MayLeaveStore("a"));
  EXPECT_FALSE(p.MayLeaveStore("b"));
  EXPECT_TRUE(p.MayLeaveStore("c"));
  EXPECT_TRUE(p.MayLeaveStore("x"));
  std::vector<PlacementCandidate> c = {{"a", 1, 1}, {"b", 2, 2}, {"c", 3, 3}, {"d", 4, 4}, {"x", 9, 9}};
  p.OrderVictims(c, RoomFor::kLeaveStore);
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"x", "d", "c"}));
}

TEST(PlacementTest, PrefetchWindowIsFreeHostOverMeanSessionSize) {
  Placement p(PlacementPolicy::kSchedulerAware);
  p.SetQueue({"a", "b", "c", "d"});
  p.Hint("h");
  p.SetCapacity(/*host_free_blocks=*/7, 16, 64, /*mean_session_blocks=*/3.0);
  EXPECT_EQ(p.prefetch_window(), 2);
  // b is already on host: the window counts only sessions that need fetching.
  auto on_ssd = [](const std::string& k) { return k != "b"; };
  EXPECT_EQ(p.PrefetchOrder(on_ssd), (std::vector<std::string>{"a", "c"}));
  p.SetCapacity(30, 16, 64, 3.0);
  EXPECT_EQ(p.PrefetchOrder(on_ssd), (std::vector<std::string>{"a", "c", "d", "h"}));
  p.SetCapacity(2, 16, 64, 3.0);
  EXPECT_TRUE(p.PrefetchOrder(on_ssd).empty());
}

TEST(PlacementTest, HintsAreBoundedOldestFirst) {
  Placement p(PlacementPolicy::kSchedulerAware);
  for (size_t i = 0; i < Placement::kMaxHints + 5; ++i) p.Hint("s" + std::to_string(i));
  EXPECT_EQ(p.lookahead_length(), static_cast<int64_t>(Placement::kMaxHints));
  std::vector<PlacementCandidate> c = {{"s0", 1, 1}, {"s10", 2, 2}};
  p.OrderVictims(c, RoomFor::kHostPrefetch);
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"s0"}));  // s0's hint was pushed out
}

}  // namespace
}  // namespace strata::storage
