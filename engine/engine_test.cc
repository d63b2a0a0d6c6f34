#include "model/backend.h"
#include "model/cpu/cpu_model.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::LimitedBackend;
using testing::SmallConfig;
using testing::TurnOutput;

class EngineTest : public ::testing::Test {
 protected:
  void Build(bool cache, EngineOptions options = {}, int64_t cache_bytes = 64 << 20) {
    engine_.reset();
    store_.reset();
    model::ModelConfig c = SmallConfig();
    auto model = std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens()));
    if (cache) {
      storage::SessionStoreOptions so;
      so.layout = Engine::ChunkLayoutFor(c, 16);
      so.host_capacity_bytes = cache_bytes;
      so.model_fingerprint = model->weights().fingerprint();
      store_ = *storage::SessionStore::Create(so);
    }
    auto e = Engine::Create(options, std::move(model), &tokenizer_, store_.get(), nullptr);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }

  TurnOutput Run(const std::string& session, const std::vector<text::ChatMessage>& messages, int max_new = 12) {
    auto stream = engine_->Submit(testing::ChatTurn(tokenizer_, session, messages, max_new));
    EXPECT_TRUE(stream.ok()) << stream.status();
    return Collect(*stream);
  }

  // Three turns, each appending the answer and a new user message.
  std::vector<TurnOutput> ThreeTurns(const std::string& session) {
    std::vector<text::ChatMessage> conv;
    std::vector<TurnOutput> outs;
    for (const char* user : {"Hello there, strata.", "Tell me more about caches.", "Thanks!"}) {
      conv.push_back({"user", user});
      outs.push_back(Run(session, conv));
      conv.push_back({"assistant", outs.back().text});
    }
    return outs;
  }

  text::ByteTokenizer tokenizer_;
  std::unique_ptr<storage::SessionStore> store_;
  std::unique_ptr<Engine> engine_;
};


// --device: auto serves a model the CUDA kernels cannot take (head_dim 16 here) on the CPU
// backend; cuda refuses it (or, without a GPU, refuses to start); a bad name is refused.
TEST(BackendChoiceTest, AutoFallsBackToTheCpuWhereCudaWouldRefuse) {
  auto weights = [] { return model::ModelWeights::Random(SmallConfig(), 3, {}); };
  model::BackendOptions o;
  o.device = "auto";
  auto automatic = model::CreateBackend(weights(), o);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ((*automatic)->name(), "cpu");
  o.device = "cuda";
  auto cuda = model::CreateBackend(weights(), o);
  EXPECT_TRUE(model::CudaAvailable() ? absl::IsInvalidArgument(cuda.status()) : absl::IsFailedPrecondition(cuda.status()))
      << cuda.status();
  o.device = "tpu";
  EXPECT_TRUE(absl::IsInvalidArgument(model::CreateBackend(weights(), o).status()));
  o.device = "cpu";
  auto cpu = model::CreateBackend(weights(), o);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->kv_row_bytes(), int64_t{SmallConfig().kv_dim()} * 4) << "the CPU backend stores fp32 rows";
}

TEST(EngineKvMemoryTest, TurnsWaitForKvMemoryAndAnswerAsWithout) {
  text::ByteTokenizer tokenizer;
  auto run = [&](int limit, std::shared_ptr<int>* peak) {
    auto backend = std::make_unique<LimitedBackend>(
        std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer.SilentTokens())), limit, 512);
    if (peak != nullptr) *peak = backend->peak();
    auto engine = *Engine::Create({}, std::move(backend), &tokenizer, nullptr, nullptr);
    std::vector<std::shared_ptr<TurnStream>> streams;
    for (int i = 0; i < 6; ++i) {
      TurnRequest r;
      r.key = {"t", "s" + std::to_string(i)};
      r.prompt = *tokenizer.RenderChat({{"user", "question " + std::to_string(i)}});
      r.max_new_tokens = 10;
      streams.push_back(*engine->Submit(std::move(r)));
    }
    std::vector<std::vector<int32_t>> answers;
    for (auto& s : streams) {
      TurnOutput out = Collect(s);
      EXPECT_TRUE(out.status.ok()) << out.status;
      answers.push_back(out.tokens);
    }
    return answers;
  };
  std::shared_ptr<int> peak;
  auto limited = run(2, &peak);
  EXPECT_EQ(*peak, 2) << "at most two sequences held at once";
  EXPECT_EQ(limited, run(100, nullptr)) << "turns that waited for KV memory answer as without the limit";
}

// One tenant's flood is refused past its own queue limit, saying so, while another
// tenant's turns still queue; nothing that was accepted is lost.
TEST(EngineTenancyTest, ATenantPastItsQueueLimitIsRefusedAndOthersStillQueue) {
  text::ByteTokenizer tokenizer;
  EngineOptions options;
  options.max_running = 1;
  options.max_queued_per_tenant = 2;
  options.warmup_tokens = 0;
  auto backend = std::make_unique<testing::GatedBackend>(
      std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, {})));
  testing::GatedBackend* gate = backend.get();
  auto engine = *Engine::Create(options, std::move(backend), &tokenizer, nullptr, nullptr);
  auto turn = [&](const std::string& tenant, int i, int max_new) {
    TurnRequest r;
    r.key = {tenant, "s" + std::to_string(i)};
    r.prompt = *tokenizer.RenderChat({{"user", "question " + std::to_string(i)}});
    r.max_new_tokens = max_new;
    return r;
  };
  auto running = engine->Submit(turn("flood", 0, 4));
  ASSERT_TRUE(running.ok());
  gate->entered.WaitForNotification();  // its step holds the engine loop: the next ones queue
  std::vector<std::shared_ptr<TurnStream>> accepted;
  for (int i = 1; i <= 2; ++i) accepted.push_back(*engine->Submit(turn("flood", i, 2)));
  auto refused = engine->Submit(turn("flood", 3, 2));
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("'flood' has 2 turns queued"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("max_queued_per_tenant"), std::string::npos);
  auto other = engine->Submit(turn("quiet", 4, 2));
  ASSERT_TRUE(other.ok()) << "another tenant's turn was refused: " << other.status();
  accepted.push_back(*other);
  accepted.push_back(*running);
  gate->open.Notify();
  for (auto& s : accepted) EXPECT_TRUE(Collect(s).status.ok());
}

// A backend that says how much one sequence can ever hold lets the engine refuse a turn
// that will never fit at once, while other turns run, instead of queueing it.
TEST(EngineKvMemoryTest, ATurnLargerThanTheWholeKvMemoryIsRefusedWhileOthersRun) {
  text::ByteTokenizer tokenizer;
  auto engine = *Engine::Create(
      {},
      std::make_unique<LimitedBackend>(
          std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer.SilentTokens())), 4, 64,
          /*says_capacity=*/true),
      &tokenizer, nullptr, nullptr);
  auto turn = [&](const std::string& session, int max_new) {
    TurnRequest r;
    r.key = {"t", session};
    r.prompt = *tokenizer.RenderChat({{"user", "hi"}});
    r.max_new_tokens = max_new;
    return *engine->Submit(std::move(r));
  };
  auto running = turn("a", 40), huge = turn("b", 100), small = turn("c", 4);
  TurnOutput refused = Collect(huge);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status)) << refused.status;
  EXPECT_NE(refused.status.message().find("holds 64"), std::string_view::npos) << refused.status;
  EXPECT_TRUE(Collect(small).status.ok());
  EXPECT_TRUE(Collect(running).status.ok());
}

TEST(EngineKvMemoryTest, ATurnThatCanNeverFitFailsWithResourceExhausted) {
  text::ByteTokenizer tokenizer;
  auto engine = *Engine::Create(
      {},
      std::make_unique<LimitedBackend>(
          std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer.SilentTokens())), 4, 64),
      &tokenizer, nullptr, nullptr);
  TurnRequest r;
  r.key = {"t", "big"};
  r.prompt = *tokenizer.RenderChat({{"user", "hello"}});
  r.max_new_tokens = 100;  // prompt + 100 > 64 tokens: never fits
  TurnOutput out = Collect(*engine->Submit(std::move(r)));
  EXPECT_TRUE(absl::IsResourceExhausted(out.status)) << out.status;
  // The session is not left stuck.
  TurnRequest small;
  small.key = {"t", "big"};
  small.prompt = *tokenizer.RenderChat({{"user", "hi"}});
  small.max_new_tokens = 4;
  EXPECT_TRUE(Collect(*engine->Submit(std::move(small))).status.ok());
}

// A byte tokenizer whose printable tokens all decode to " x", and which drops a text's
// first leading space as SentencePiece decoders do.
class LeadingSpaceTokenizer final : public text::Tokenizer {
 public:
  int vocab_size() const override { return bytes_.vocab_size(); }
  absl::StatusOr<std::vector<int32_t>> RenderChat(absl::Span<const text::ChatMessage> messages) const override {
    return bytes_.RenderChat(messages);
  }
  std::string_view TokenBytes(int32_t token) const override { return token < 256 ? " x" : ""; }
  bool IsStopToken(int32_t token) const override { return bytes_.IsStopToken(token); }
  std::vector<int32_t> SilentTokens() const override { return bytes_.SilentTokens(); }
  bool DropsLeadingSpace() const override { return true; }

 private:
  text::ByteTokenizer bytes_;
};

TEST(EngineTextTest, AnAnswerDropsItsFirstSpaceWhenTheTokenizerSaysSo) {
  LeadingSpaceTokenizer tokenizer;
  auto engine = *Engine::Create(
      {}, std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer.SilentTokens())), &tokenizer,
      nullptr, nullptr);
  TurnRequest r;
  r.key = {"t", "s"};
  r.prompt = *tokenizer.RenderChat({{"user", "hello"}});
  r.max_new_tokens = 6;
  TurnOutput out = Collect(*engine->Submit(std::move(r)));
  ASSERT_TRUE(out.status.ok()) << out.status;
  std::string want;
  for (int32_t t : out.tokens) want += tokenizer.TokenBytes(t);
  if (!want.empty()) want.erase(0, 1);
  ASSERT_FALSE(want.empty()) << "the answer had no text tokens";
  EXPECT_EQ(out.text, want) << "only the answer's very first space is dropped";
}

TEST_F(EngineTest, LaterTurnsComputeOnlyNewTokens) {
  for (bool hbm : {true, false}) {
    EngineOptions options;
    options.hbm.capacity_bytes = hbm ? -1 : 0;
    Build(/*cache=*/true, options);
    auto outs = ThreeTurns("s");
    EXPECT_EQ(outs[0].result.usage.cached_tokens, 0);
    EXPECT_EQ(outs[0].result.cache_tier, storage::Tier::kNone);
    for (int t = 1; t < 3; ++t) {
      const TurnUsage& u = outs[t].result.usage;
      const TurnUsage& prev = outs[t - 1].result.usage;
      // Everything of the previous turn whose KV was computed is reused: its prompt and
      // every answer token but the last (which was sampled, never fed).
      EXPECT_EQ(u.cached_tokens, prev.prompt_tokens + prev.completion_tokens - 1) << "turn " << t + 1;
      EXPECT_EQ(u.computed_tokens, u.prompt_tokens - u.cached_tokens);
      // With the HBM tier the previous turn's sequence is still in memory; without, the
      // KV comes from the host tier.
      EXPECT_EQ(outs[t].result.cache_tier, hbm ? storage::Tier::kHbm : storage::Tier::kHost) << "turn " << t + 1;
    }
  }
}

TEST_F(EngineTest, CachedAnswersEqualUncachedAnswers) {
  Build(/*cache=*/true);
  auto cached = ThreeTurns("s");
  Build(/*cache=*/false);
  auto uncached = ThreeTurns("s");
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(cached[t].tokens, uncached[t].tokens) << "turn " << t + 1;
    EXPECT_EQ(uncached[t].result.usage.cached_tokens, 0);
  }
}

TEST_F(EngineTest, EditedHistoryReusesOnlyTheUnchangedPrefix) {
  Build(/*cache=*/true);
  std::vector<text::ChatMessage> conv = {{"user", "The first question is long enough."}};
  TurnOutput first = Run("s", conv);
  std::vector<text::ChatMessage> edited = {{"user", "The first question is LONG enough."}, {"user", "again"}};
  TurnOutput second = Run("s", edited);
  // Tokens: <bos> <|user|> "The first question is " (22 bytes) match, then the edit.
  EXPECT_EQ(second.result.usage.cached_tokens, 2 + 22);
  Build(/*cache=*/false);
  EXPECT_EQ(Run("s", edited).tokens, second.tokens);
}

TEST_F(EngineTest, ConcurrentSessionsShareDecodeSteps) {
  Build(/*cache=*/true);
  std::vector<std::shared_ptr<TurnStream>> streams;
  for (int i = 0; i < 8; ++i) {
    TurnRequest r;
    r.key = {"t", "s" + std::to_string(i)};
    r.prompt = *tokenizer_.RenderChat({{"user", "hi " + std::to_string(i)}});
    r.max_new_tokens = 16;
    streams.push_back(*engine_->Submit(std::move(r)));
  }
  for (auto& s : streams) EXPECT_TRUE(Collect(s).status.ok());
  EXPECT_GT(engine_->Stats().max_batch_turns, 1) << "turns of different sessions were not batched";
}

TEST_F(EngineTest, TurnsOfOneSessionRunOneAfterTheOther) {
  Build(/*cache=*/true);
  std::vector<text::ChatMessage> conv = {{"user", "first message of the session"}};
  TurnRequest a;
  a.key = {"t", "same"};
  a.prompt = *tokenizer_.RenderChat(conv);
  a.max_new_tokens = 8;
  TurnRequest b = a;
  b.prompt.insert(b.prompt.end(), {'x', 'y', 'z'});
  auto sa = *engine_->Submit(std::move(a));
  auto sb = *engine_->Submit(std::move(b));
  TurnOutput oa = Collect(sa), ob = Collect(sb);
  ASSERT_TRUE(oa.status.ok() && ob.status.ok());
  // b was admitted only after a saved its KV, so it reuses a's whole prompt.
  EXPECT_EQ(ob.result.usage.cached_tokens, oa.result.usage.prompt_tokens);
}

TEST_F(EngineTest, RejectsBadTurnsWithoutSideEffects) {
  Build(/*cache=*/true);
  auto bad = [&](auto mutate) {
    TurnRequest r;
    r.key = {"t", "s"};
    r.prompt = {text::ByteTokenizer::kBos, 'a'};
    r.max_new_tokens = 4;
    mutate(r);
    return engine_->Submit(std::move(r)).status();
  };
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.prompt.clear(); })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.prompt.push_back(100000); })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.prompt.push_back(-1); })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.prompt.assign(512, 'a'); })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.max_new_tokens = 0; })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.max_new_tokens = 1 << 30; })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.sampling.temperature = -1; })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.sampling.top_p = 2; })));
  EXPECT_TRUE(absl::IsInvalidArgument(bad([](TurnRequest& r) { r.stop = {""}; })));
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "s"}).status()));
}

TEST_F(EngineTest, AnswerIsBoundedByTheContext) {
  Build(/*cache=*/true);
  TurnRequest r;
  r.key = {"t", "s"};
  r.prompt.assign(509, 'a');
  r.max_new_tokens = 100;
  TurnOutput out = Collect(*engine_->Submit(std::move(r)));
  ASSERT_TRUE(out.status.ok());
  EXPECT_LE(out.result.usage.completion_tokens, 3);
}

TEST_F(EngineTest, SeededSamplingRepeats) {
  Build(/*cache=*/false);
  auto sample = [&](uint64_t seed) {
    TurnRequest r;
    r.key = {"t", "s"};
    r.prompt = *tokenizer_.RenderChat({{"user", "sample me"}});
    r.max_new_tokens = 24;
    r.sampling = {.temperature = 1.5f, .top_p = 0.95f, .seed = seed};
    return Collect(*engine_->Submit(std::move(r))).tokens;
  };
  EXPECT_EQ(sample(5), sample(5));
  EXPECT_NE(sample(5), sample(6));
}

TEST_F(EngineTest, StopStringEndsTheTurnAndIsNotSent) {
  Build(/*cache=*/false);
  TurnOutput free_run = Run("s", {{"user", "go"}}, 24);
  ASSERT_GE(free_run.text.size(), 6u);
  std::string stop = free_run.text.substr(3, 2);
  TurnRequest r;
  r.key = {"t", "s"};
  r.prompt = *tokenizer_.RenderChat({{"user", "go"}});
  r.max_new_tokens = 24;
  r.stop = {stop};
  TurnOutput out = Collect(*engine_->Submit(std::move(r)));
  EXPECT_EQ(out.result.finish, FinishReason::kStop);
  EXPECT_EQ(out.text, free_run.text.substr(0, free_run.text.find(stop)));
}

TEST_F(EngineTest, SmallCacheEvictsButAnswersStayRight) {
  Build(/*cache=*/true, {}, /*cache_bytes=*/3 * Engine::ChunkLayoutFor(SmallConfig(), 16).BlockBytes());
  auto a = ThreeTurns("a");
  auto b = ThreeTurns("b");
  Build(/*cache=*/false);
  auto ua = ThreeTurns("a");
  for (int t = 0; t < 3; ++t) EXPECT_EQ(a[t].tokens, ua[t].tokens);
}

TEST_F(EngineTest, ManyThreadsSubmitCancelAndFinish) {
  Build(/*cache=*/true);
  std::vector<std::thread> threads;
  std::atomic<int> finished{0}, cancelled{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        TurnRequest r;
        r.key = {"t", "s" + std::to_string(t % 4)};  // pairs of threads share a session
        r.prompt = *tokenizer_.RenderChat({{"user", "thread " + std::to_string(t)}});
        r.max_new_tokens = 32;
        auto stream = engine_->Submit(std::move(r));
        ASSERT_TRUE(stream.ok());
        if ((t + i) % 3 == 0) (*stream)->Cancel();
        TurnOutput out = Collect(*stream);
        if (out.status.ok()) ++finished;
        else if (absl::IsCancelled(out.status)) ++cancelled;
        else ADD_FAILURE() << out.status;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(finished + cancelled, 32);
  EXPECT_GT(cancelled.load(), 0);
  // No session is left stuck: each can take another turn.
  for (int s = 0; s < 4; ++s) {
    EXPECT_TRUE(Run("s" + std::to_string(s), {{"user", "after"}}, 2).status.ok());
  }
}

TEST_F(EngineTest, DestroyingTheEngineEndsQueuedAndRunningTurns) {
  Build(/*cache=*/true);
  std::vector<std::shared_ptr<TurnStream>> streams;
  for (int i = 0; i < 4; ++i) {
    TurnRequest r;
    r.key = {"t", "same"};  // one runs, three wait behind it
    r.prompt = *tokenizer_.RenderChat({{"user", "long answer please"}});
    r.max_new_tokens = 400;
    streams.push_back(*engine_->Submit(std::move(r)));
  }
  engine_.reset();
  for (auto& s : streams) {
    TurnOutput out = Collect(s);
    EXPECT_TRUE(out.status.ok() || absl::IsUnavailable(out.status)) << out.status;
  }
}

}  // namespace
}  // namespace strata::engine
