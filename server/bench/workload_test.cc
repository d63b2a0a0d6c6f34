#include "server/bench/workload.h"

#include <cmath>
#include <set>

#include "gtest/gtest.h"

namespace strata::server::bench {
namespace {

SyntheticWorkloadOptions ManySessions() {
  SyntheticWorkloadOptions o;
  o.sessions = 4000;
  o.session_rate_per_s = 10;
  o.mean_turns = 3;
  o.mean_prompt_tokens = 50;
  o.mean_output_tokens = 20;
  o.mean_think_s = 2;
  o.max_context_tokens = 1 << 20;  // no session is cut short: the means stay unbiased
  o.seed = 7;
  return o;
}

TEST(SyntheticWorkloadTest, DistributionsHaveTheirMeans) {
  const SyntheticWorkloadOptions o = ManySessions();
  absl::StatusOr<Workload> w = MakeSyntheticWorkload(o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->sessions.size(), 4000u);
  double turns = 0, prompt = 0, output = 0, think_ms = 0, gaps = 0;
  int64_t n = 0, with_gap = 0;
  std::vector<double> starts;
  for (const WorkloadSession& s : w->sessions) {
    turns += s.turns.size();
    starts.push_back(s.turns[0].arrival_ms);
    for (size_t t = 0; t < s.turns.size(); ++t) {
      prompt += s.turns[t].new_tokens.size();
      output += s.turns[t].max_new_tokens;
      ++n;
      if (t > 0) {
        think_ms += s.turns[t].arrival_ms - s.turns[t - 1].arrival_ms;
        ++with_gap;
      }
      for (int32_t id : s.turns[t].new_tokens) ASSERT_TRUE(id >= 1 && id <= 255) << "token id " << id;
    }
  }
  std::sort(starts.begin(), starts.end());
  gaps = (starts.back() - starts.front()) / (starts.size() - 1);
  EXPECT_NEAR(turns / w->sessions.size(), 3.0, 0.15) << "mean turns per session";
  EXPECT_NEAR(prompt / n, 50.0, 2.5) << "mean new prompt tokens per turn";
  EXPECT_NEAR(output / n, 20.0, 1.0) << "mean answer tokens per turn";
  EXPECT_NEAR(think_ms / with_gap, 2000.0, 100.0) << "mean think time";
  EXPECT_NEAR(gaps, 100.0, 5.0) << "mean gap between session arrivals (rate 10/s)";
}

TEST(SyntheticWorkloadTest, SameSeedReproducesTheWorkload) {
  SyntheticWorkloadOptions o = ManySessions();
  o.sessions = 50;
  o.system_prompts = 3;
  o.system_prompt_tokens = 40;
  absl::StatusOr<Workload> a = MakeSyntheticWorkload(o);
  absl::StatusOr<Workload> b = MakeSyntheticWorkload(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << "the same options and seed gave two different workloads";
}

TEST(SyntheticWorkloadTest, DifferentSeedGivesDifferentWorkload) {
  SyntheticWorkloadOptions o = ManySessions();
  o.sessions = 50;
  absl::StatusOr<Workload> a = MakeSyntheticWorkload(o);
  o.seed = 8;
  absl::StatusOr<Workload> b = MakeSyntheticWorkload(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(*a == *b);
  EXPECT_NE(a->sessions[0].turns[0].new_tokens, b->sessions[0].turns[0].new_tokens) << "token contents ignore the seed";
}

TEST(SyntheticWorkloadTest, SystemPromptsAreSharedAndSpreadOverSessions) {
  SyntheticWorkloadOptions o = ManySessions();
  o.sessions = 300;
  o.system_prompts = 4;
  o.system_prompt_tokens = 100;
  o.max_context_tokens = 600;
  absl::StatusOr<Workload> w = MakeSyntheticWorkload(o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->system_prompts.size(), 4u);
  std::set<std::vector<int32_t>> distinct(w->system_prompts.begin(), w->system_prompts.end());
  EXPECT_EQ(distinct.size(), 4u) << "the K system prompts must differ";
  std::vector<int> uses(4, 0);
  for (const WorkloadSession& s : w->sessions) {
    ASSERT_TRUE(s.system_prompt >= 0 && s.system_prompt < 4);
    ++uses[s.system_prompt];
    int64_t context = 100;
    for (const WorkloadTurn& t : s.turns) context += static_cast<int64_t>(t.new_tokens.size()) + t.max_new_tokens;
    int64_t last_prompt = context - s.turns.back().max_new_tokens;
    EXPECT_LE(last_prompt, 600) << "a prompt exceeds max_context_tokens with its system prompt";
  }
  for (int k = 0; k < 4; ++k) EXPECT_GT(uses[k], 40) << "system prompt " << k << " is rarely used";
  for (const auto& p : w->system_prompts) EXPECT_EQ(p.size(), 100u);
}

TEST(SyntheticWorkloadTest, RejectsBadOptions) {
  SyntheticWorkloadOptions o;
  o.session_rate_per_s = -1;
  EXPECT_EQ(MakeSyntheticWorkload(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SyntheticWorkloadOptions();
  o.sessions = 0;
  EXPECT_EQ(MakeSyntheticWorkload(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SyntheticWorkloadOptions();
  o.system_prompts = 2;
  o.system_prompt_tokens = o.max_context_tokens;
  EXPECT_EQ(MakeSyntheticWorkload(o).status().code(), absl::StatusCode::kInvalidArgument);
}

storage::Trace TwoSessionTrace() {
  storage::Trace t;
  t.requests = {{.arrival_ms = 0, .session_id = "a", .context_tokens = 10, .reusable_tokens = 0, .output_tokens = 5},
                {.arrival_ms = 100, .session_id = "b", .context_tokens = 7, .reusable_tokens = 0, .output_tokens = 3},
                {.arrival_ms = 250, .session_id = "a", .context_tokens = 19, .reusable_tokens = 15, .output_tokens = 2}};
  t.sessions = 2;
  return t;
}

TEST(TraceWorkloadTest, KeepsTheTraceTiming) {
  absl::StatusOr<Workload> w = MakeTraceWorkload(TwoSessionTrace(), {});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->sessions.size(), 2u);
  EXPECT_EQ(w->sessions[0].session_id, "a");
  ASSERT_EQ(w->sessions[0].turns.size(), 2u);
  EXPECT_EQ(w->sessions[0].turns[0].arrival_ms, 0);
  EXPECT_EQ(w->sessions[0].turns[1].arrival_ms, 250);
  EXPECT_EQ(w->sessions[1].turns[0].arrival_ms, 100);
  EXPECT_EQ(w->sessions[0].turns[0].new_tokens.size(), 10u);
  EXPECT_EQ(w->sessions[0].turns[1].new_tokens.size(), 4u) << "context 19 - reusable 15";
  EXPECT_EQ(w->sessions[0].turns[0].max_new_tokens, 5);
  EXPECT_EQ(w->sessions[1].turns[0].max_new_tokens, 3);
}

TEST(TraceWorkloadTest, ScalesTheTraceTiming) {
  absl::StatusOr<Workload> w = MakeTraceWorkload(TwoSessionTrace(), {.time_scale = 0.5});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->sessions[0].turns[1].arrival_ms, 125);
  EXPECT_EQ(w->sessions[1].turns[0].arrival_ms, 50);
  EXPECT_EQ(MakeTraceWorkload(TwoSessionTrace(), {.time_scale = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TraceWorkloadTest, ReplaysASessionTraceFileAsWritten) {
  storage::SyntheticTraceOptions o;
  o.sessions = 20;
  o.mean_think_s = 1;
  o.seed = 3;
  const storage::Trace original = storage::SyntheticTrace(o);
  const std::string path = ::testing::TempDir() + "/bench_trace.jsonl";
  ASSERT_TRUE(storage::WriteSessionTrace(original, path).ok());
  absl::StatusOr<storage::Trace> loaded = storage::LoadTrace(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<Workload> w = MakeTraceWorkload(*loaded, {.time_scale = 2});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->TotalTurns(), static_cast<int64_t>(original.requests.size()));
  // Every request of the trace is a turn at twice its arrival time.
  std::multiset<double> want, got;
  for (const auto& r : original.requests) want.insert(r.arrival_ms * 2);
  for (const auto& s : w->sessions) for (const auto& t : s.turns) got.insert(t.arrival_ms);
  EXPECT_EQ(want, got);
}

TEST(SweepWorkloadTest, EachSessionSendsHistoryThenNewTokensInLockstep) {
  absl::StatusOr<Workload> w = MakeSweepWorkload(
      {.history_tokens = 300, .new_tokens = 20, .concurrency = 5, .answer_tokens = 3, .output_tokens = 6});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->turn_barrier);
  ASSERT_EQ(w->sessions.size(), 5u);
  std::set<std::string> ids;
  for (const WorkloadSession& s : w->sessions) {
    ids.insert(s.session_id);
    ASSERT_EQ(s.turns.size(), 2u);
    EXPECT_EQ(s.turns[0].new_tokens.size(), 300u);
    EXPECT_EQ(s.turns[0].max_new_tokens, 3);
    EXPECT_FALSE(s.turns[0].measured);
    EXPECT_EQ(s.turns[1].new_tokens.size(), 20u);
    EXPECT_EQ(s.turns[1].max_new_tokens, 6);
    EXPECT_TRUE(s.turns[1].measured);
  }
  EXPECT_EQ(ids.size(), 5u) << "session ids must be distinct";
  EXPECT_EQ(MakeSweepWorkload({.concurrency = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w->round_gap_ms, 0) << "turn 2 follows turn 1 at once by default";
  absl::StatusOr<Workload> gapped = MakeSweepWorkload({.gap_ms = 500});
  ASSERT_TRUE(gapped.ok()) << gapped.status();
  EXPECT_EQ(gapped->round_gap_ms, 500);
  EXPECT_EQ(MakeSweepWorkload({.gap_ms = -1}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::server::bench
