// The engine's per-turn metrics (strata_e2e_request_seconds, strata_queue_seconds, strata_admit_seconds,
// strata_prefill_seconds, strata_decode_seconds, strata_prompt_tokens,
// strata_generation_tokens, strata_finished_turns_total{reason}): what each turn adds to
// them, by how it ended, read from the registry's exposition as a scrape would; the
// steps' times by what they held (strata_step_seconds{kind}); and where the engine
// thread's time went (strata_engine_thread_seconds_total{part}).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/metrics.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::SmallConfig;
using testing::TurnOutput;

const char* const kReasons[] = {"stop", "length", "cancelled", "deadline", "error", "shutdown"};
const char* const kHistograms[] = {"strata_e2e_request_seconds", "strata_queue_seconds",
                                   "strata_admit_seconds",       "strata_prefill_seconds",
                                   "strata_decode_seconds",      "strata_prompt_tokens",
                                   "strata_generation_tokens"};

// The byte tokenizer, except that a turn ends only on the token the test chooses (none at
// first): whatever the random model draws, a turn ends by its length or on that token.
class ChosenStopTokenizer final : public text::Tokenizer {
 public:
  int vocab_size() const override { return bytes_.vocab_size(); }
  absl::StatusOr<std::vector<int32_t>> RenderChat(absl::Span<const text::ChatMessage> messages) const override {
    return bytes_.RenderChat(messages);
  }
  std::string_view TokenBytes(int32_t token) const override {
    if (const int64_t us = token_delay_us_.load(); us > 0) absl::SleepFor(absl::Microseconds(us));
    return bytes_.TokenBytes(token);
  }
  bool IsStopToken(int32_t token) const override { return token == stop_.load(); }
  std::vector<int32_t> SilentTokens() const override { return bytes_.SilentTokens(); }
  void StopOn(int32_t token) { stop_ = token; }
  // Each token's bytes looked up `delay` late (the engine thread's work after a step).
  void DelayTokenBytes(absl::Duration delay) { token_delay_us_ = absl::ToInt64Microseconds(delay); }

 private:
  text::ByteTokenizer bytes_;
  std::atomic<int32_t> stop_{-1};
  std::atomic<int64_t> token_delay_us_{0};
};


class EngineMetricsTest : public ::testing::Test {
 protected:
  std::unique_ptr<model::CpuModel> Model() const {
    return std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer_.SilentTokens()));
  }

  // An engine with the cache off, counting into registry_.
  void Build(std::unique_ptr<model::ModelBackend> backend) {
    EngineOptions options;
    options.warmup_tokens = 0;
    auto e = Engine::Create(options, std::move(backend), &tokenizer_, nullptr, &registry_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }

  TurnRequest Turn(const std::string& session, int max_new) const {
    TurnRequest r;
    r.key = {"t", session};
    r.prompt = *tokenizer_.RenderChat({{"user", "How long is a turn?"}});
    r.max_new_tokens = max_new;
    return r;
  }

  TurnOutput Run(const std::string& session, int max_new) { return Collect(*engine_->Submit(Turn(session, max_new))); }

  double Value(const std::string& key) { return testing::Exported(registry_, key); }
  double Finished(const std::string& reason) {
    return Value("strata_finished_turns_total{reason=\"" + reason + "\"}");
  }

  ChosenStopTokenizer tokenizer_;
  metrics::Registry registry_;  // outlives the engine
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineMetricsTest, EveryFinishReasonAndHistogramIsExportedFromTheStart) {
  Build(Model());
  for (const char* reason : kReasons) EXPECT_EQ(Finished(reason), 0) << reason;
  for (const char* name : kHistograms) {
    EXPECT_EQ(Value(std::string(name) + "_count"), 0) << name;
    EXPECT_EQ(Value(std::string(name) + "_bucket{le=\"+Inf\"}"), 0) << name;
  }
}

TEST_F(EngineMetricsTest, ATurnCutAtMaxNewTokensCountsAsLengthWithItsTimesAndTokens) {
  Build(Model());
  const TurnOutput out = Run("s", 12);
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.result.finish, FinishReason::kLength);
  EXPECT_EQ(Finished("length"), 1);
  for (const char* reason : {"stop", "cancelled", "deadline", "error", "shutdown"}) {
    EXPECT_EQ(Finished(reason), 0) << reason;
  }
  for (const char* name : kHistograms) EXPECT_EQ(Value(std::string(name) + "_count"), 1) << name;
  EXPECT_EQ(Value("strata_generation_tokens_sum"), 12);
  EXPECT_EQ(Value("strata_generation_tokens_sum"), static_cast<double>(out.result.usage.completion_tokens));
  EXPECT_EQ(Value("strata_prompt_tokens_sum"), static_cast<double>(out.result.usage.prompt_tokens));
  // One turn's life from the same instants: queue + prefill is its TTFT, and queue +
  // prefill + decode its end-to-end time.
  const double queue = Value("strata_queue_seconds_sum"), prefill = Value("strata_prefill_seconds_sum"),
               decode = Value("strata_decode_seconds_sum"), e2e = Value("strata_e2e_request_seconds_sum");
  EXPECT_NEAR(queue + prefill, Value("strata_ttft_seconds_sum{tier=\"none\"}"), 1e-6);
  EXPECT_NEAR(queue + prefill, out.result.ttft_ms / 1000, 1e-6);
  EXPECT_NEAR(queue + prefill + decode, e2e, 1e-6);
  EXPECT_GT(prefill, 0);
  // The admission is timed from the same instant as the prefill, and is part of it.
  const double admit = Value("strata_admit_seconds_sum");
  EXPECT_GT(admit, 0);
  EXPECT_LT(admit, prefill);
  EXPECT_GT(decode, 0) << "eleven more tokens were drawn after the first";
}

TEST_F(EngineMetricsTest, ATurnEndedByItsEndOfTurnTokenCountsAsStop) {
  Build(Model());
  const TurnOutput free_run = Run("free", 12);
  ASSERT_EQ(free_run.tokens.size(), 12u);
  // The same turn again (greedy, the cache off: the same tokens) ends on the token it
  // drew fifth, at that token's first draw.
  const int32_t stop = free_run.tokens[4];
  const int64_t ends_at = std::find(free_run.tokens.begin(), free_run.tokens.end(), stop) - free_run.tokens.begin() + 1;
  tokenizer_.StopOn(stop);
  const TurnOutput out = Run("stops", 12);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.result.finish, FinishReason::kStop);
  EXPECT_EQ(out.result.usage.completion_tokens, ends_at);
  EXPECT_EQ(Finished("stop"), 1);
  EXPECT_EQ(Finished("length"), 1) << "the free run";
  EXPECT_EQ(Value("strata_generation_tokens_count"), 2);
  EXPECT_EQ(Value("strata_generation_tokens_sum"), static_cast<double>(12 + ends_at));
}

// Each step counted once, by what it held: a turn's prompt alone (prefill), then a second
// turn's prompt beside the first's decode (mixed), then decodes only.
TEST_F(EngineMetricsTest, StepsAreTimedByWhatTheyHeld) {
  auto backend = std::make_unique<testing::GatedBackend>(Model());
  testing::GatedBackend* gate = backend.get();
  Build(std::move(backend));
  for (const char* kind : {"decode", "prefill", "mixed"}) {
    EXPECT_EQ(Value(std::string("strata_step_seconds_count{kind=\"") + kind + "\"}"), 0) << kind << " from the start";
  }
  auto first = *engine_->Submit(Turn("first", 8));
  gate->entered.WaitForNotification();  // its prefill step holds the engine loop
  auto second = *engine_->Submit(Turn("second", 4));
  gate->open.Notify();
  ASSERT_TRUE(Collect(first).status.ok());
  ASSERT_TRUE(Collect(second).status.ok());
  // Step 1: first's prompt. Step 2: first's second token beside second's prompt. Steps 3-8:
  // first's tokens 3-8, with second's 2-4 in steps 3-5.
  EXPECT_EQ(Value("strata_step_seconds_count{kind=\"prefill\"}"), 1);
  EXPECT_EQ(Value("strata_step_seconds_count{kind=\"mixed\"}"), 1);
  EXPECT_EQ(Value("strata_step_seconds_count{kind=\"decode\"}"), 6);
  EXPECT_EQ(engine_->Stats().steps, 8);
  EXPECT_GT(Value("strata_step_seconds_sum{kind=\"decode\"}"), 0);
}

// The engine thread's time by part: its forward steps (the same time strata_step_seconds
// sums), the work after each step (a token's bytes looked up 3 ms late: emit), and the
// wait for work (idle); every part exported from the start.
TEST_F(EngineMetricsTest, TheEngineThreadsTimeIsSplitIntoItsParts) {
  const absl::Time built = absl::Now();
  Build(std::make_unique<testing::SlowBackend>(Model(), absl::Milliseconds(10)));
  auto part = [&](const char* name) {
    return Value(std::string("strata_engine_thread_seconds_total{part=\"") + name + "\"}");
  };
  for (const char* name : {"idle", "schedule", "forward", "emit", "finish", "release"}) {
    EXPECT_GE(part(name), 0) << name << " exported from the start";
  }
  EXPECT_EQ(part("forward"), 0) << "no step yet";
  tokenizer_.DelayTokenBytes(absl::Milliseconds(3));
  ASSERT_TRUE(Run("first", 8).status.ok());
  // 8 steps (the prompt, then 7 decodes), each at least 10 ms; 8 tokens emitted.
  double step_sum = 0;
  for (const char* kind : {"decode", "prefill", "mixed"}) {
    step_sum += Value(std::string("strata_step_seconds_sum{kind=\"") + kind + "\"}");
  }
  EXPECT_GE(part("forward"), 0.080);
  EXPECT_NEAR(part("forward"), step_sum, 1e-6) << "the same laps time both";
  // The last token's emit is counted before its turn's end (finish): all 8 are in.
  EXPECT_GE(part("emit"), 0.024);
  EXPECT_LT(part("emit"), part("forward"));
  // The turn's end is counted once the engine thread has done it, a moment after the client
  // saw its stream end (End finishes the stream first).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (part("finish") == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_GT(part("finish"), 0) << "the turn's end";
  // Nothing to do for 100 ms: counted as idle once the next turn wakes the thread.
  const double idle_before = part("idle");
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(Run("second", 2).status.ok());
  EXPECT_GE(part("idle") - idle_before, 0.095);
  double total = 0;
  for (const char* name : {"idle", "schedule", "forward", "emit", "finish", "release"}) total += part(name);
  EXPECT_LE(total, absl::ToDoubleSeconds(absl::Now() - built)) << "the parts never overlap";
}

// A turn cancelled while it runs because its call's deadline passed, and one its client
// cancelled while it was queued, are counted apart, and fail with their own statuses.
TEST_F(EngineMetricsTest, CancelledAndDeadlineTurnsAreCountedApart) {
  auto backend = std::make_unique<testing::GatedBackend>(Model());
  testing::GatedBackend* gate = backend.get();
  Build(std::move(backend));
  auto running = *engine_->Submit(Turn("running", 64));
  gate->entered.WaitForNotification();  // its prefill holds the engine loop
  auto queued = *engine_->Submit(Turn("queued", 64));
  running->Cancel(CancelReason::kDeadline);
  queued->Cancel(CancelReason::kClient);
  gate->open.Notify();
  const TurnOutput ran = Collect(running), never_ran = Collect(queued);
  EXPECT_TRUE(absl::IsDeadlineExceeded(ran.status)) << ran.status;
  EXPECT_EQ(ran.tokens.size(), 1u) << "its prefill drew a first token before the cancel was seen";
  EXPECT_TRUE(absl::IsCancelled(never_ran.status)) << never_ran.status;
  EXPECT_TRUE(never_ran.tokens.empty());
  EXPECT_EQ(Finished("deadline"), 1);
  EXPECT_EQ(Finished("cancelled"), 1);
  EXPECT_EQ(Finished("length") + Finished("stop") + Finished("error"), 0);
  // Both ended; only the running one was admitted, drew a token and decoded.
  EXPECT_EQ(Value("strata_e2e_request_seconds_count"), 2);
  EXPECT_EQ(Value("strata_prompt_tokens_count"), 2);
  EXPECT_EQ(Value("strata_queue_seconds_count"), 1);
  EXPECT_EQ(Value("strata_prefill_seconds_count"), 1);
  EXPECT_EQ(Value("strata_decode_seconds_count"), 1);
  EXPECT_EQ(Value("strata_generation_tokens_sum"), 1);
}

TEST_F(EngineMetricsTest, ATurnTheKvMemoryCanNeverHoldCountsAsError) {
  // A backend whose sequences hold at most 64 tokens, and says so.
  Build(std::make_unique<testing::LimitedBackend>(Model(), 4, 64, /*says_capacity=*/true));
  const TurnOutput out = Run("huge", 100);
  EXPECT_TRUE(absl::IsResourceExhausted(out.status)) << out.status;
  EXPECT_EQ(Finished("error"), 1);
  EXPECT_EQ(Value("strata_e2e_request_seconds_count"), 1);
  EXPECT_EQ(Value("strata_queue_seconds_count"), 0) << "it was never admitted";
  EXPECT_EQ(Value("strata_admit_seconds_count"), 0);
}

}  // namespace
}  // namespace strata::engine
