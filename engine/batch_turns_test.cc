// Batch turns in the engine (CPU backend): a group's prefix is computed once and shared in
// KV memory, never stored; the answers equal each prompt alone with the cache off; the
// prefix is freed when its group is released; chat turns go ahead of batch turns.
#include <memory>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::Count;
using testing::RunAll;
using testing::HostOnlyStore;
using testing::SmallConfig;
using testing::TurnOutput;

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 32 + (i * (11 + salt) + 7 * salt) % 90;
  return t;
}

TurnRequest BatchTurn(int index, const std::vector<int32_t>& prefix, int own, int max_new) {
  TurnRequest r;
  r.key = {"t", "\x01" "batch/" + std::to_string(index)};
  r.prompt = prefix;
  const std::vector<int32_t> tail = Tokens(own, 100 + index);
  r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
  r.system_tokens = static_cast<int64_t>(prefix.size());
  r.max_new_tokens = max_new;
  r.batch = true;
  return r;
}

class BatchTurnsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> MakeEngine(storage::SessionStore* store, metrics::Registry* registry, int max_running = 64,
                                     int reserved = 4, int batch_pool = 0, testing::GatedBackend** gate = nullptr) {
    auto cpu = std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer_.SilentTokens()));
    std::unique_ptr<model::ModelBackend> model;
    if (gate != nullptr) {
      auto gated = std::make_unique<testing::GatedBackend>(std::move(cpu));
      *gate = gated.get();
      model = std::move(gated);
    } else {
      model = std::move(cpu);
    }
    EngineOptions options;
    options.warmup_tokens = 0;
    options.max_running = max_running;
    options.batch_reserved_running = reserved;
    options.max_running_batch = batch_pool;
    auto e = Engine::Create(options, std::move(model), &tokenizer_, store, registry);
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }
  uint64_t Fingerprint() const { return model::ModelWeights::Random(SmallConfig(), 99, {}).fingerprint(); }

  // Queues `n` batch turns of 4 own tokens and `max_new` answers, then a 4-token chat turn.
  static std::pair<std::vector<std::shared_ptr<TurnStream>>, std::shared_ptr<TurnStream>> BatchThenChat(
      Engine& engine, int n, int max_new) {
    std::vector<std::shared_ptr<TurnStream>> batch;
    for (int i = 0; i < n; ++i) {
      TurnRequest t = BatchTurn(i, Tokens(20, 3), 4, max_new);
      t.system_tokens = 0;
      auto s = engine.Submit(t);
      EXPECT_TRUE(s.ok()) << s.status();
      batch.push_back(*s);
    }
    TurnRequest chat = BatchTurn(99, Tokens(20, 4), 4, 4);
    chat.batch = false;
    chat.system_tokens = 0;
    chat.key = {"t", "chat"};
    auto chat_stream = engine.Submit(chat);
    EXPECT_TRUE(chat_stream.ok()) << chat_stream.status();
    return {batch, *chat_stream};
  }

  text::ByteTokenizer tokenizer_;
};

TEST_F(BatchTurnsTest, AGroupComputesItsPrefixOnceAndAnswersAsEachPromptAloneWithTheCacheOff) {
  const std::vector<int32_t> prefix = Tokens(100, 1);  // 96 shared: 6 chunks of 16
  std::vector<TurnRequest> turns;
  for (int i = 0; i < 6; ++i) turns.push_back(BatchTurn(i, prefix, 5 + i, 12));

  // Each prompt alone, the cache off, as a chat turn.
  auto reference = MakeEngine(nullptr, nullptr);
  std::vector<TurnOutput> alone;
  for (TurnRequest t : turns) {
    t.batch = false;
    t.system_tokens = 0;
    alone.push_back(RunAll(*reference, {t})[0]);
  }

  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "cache on" : "cache off");
    metrics::Registry registry;
    auto store = cache ? HostOnlyStore(SmallConfig(), Fingerprint()) : nullptr;
    auto engine = MakeEngine(store.get(), &registry);
    const std::vector<TurnOutput> out = RunAll(*engine, turns);
    for (size_t i = 0; i < turns.size(); ++i) {
      ASSERT_TRUE(out[i].status.ok()) << out[i].status;
      EXPECT_EQ(out[i].tokens, alone[i].tokens) << "turn " << i;
      EXPECT_EQ(out[i].result.usage.cached_tokens, 100) << "the group's prefix is read, not computed";
    }
    EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "computed"}}), 1);
    ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
    if (store != nullptr) {
      // Nothing of a batch is stored: no sessions, no prefix.
      EXPECT_TRUE(store->List("t").empty());
      EXPECT_EQ(store->Stats().sessions, 0);
    }
    // In KV memory until released; then freed.
    auto prompts = engine->ListSystemPrompts("t");
    ASSERT_EQ(prompts.size(), 1u);
    EXPECT_TRUE(prompts[0].resident);
    EXPECT_FALSE(prompts[0].stored);
    EXPECT_TRUE(engine->ReleaseBatchPrefix("t", prefix));
    EXPECT_TRUE(engine->ListSystemPrompts("t").empty());
    EXPECT_FALSE(engine->ReleaseBatchPrefix("t", prefix));  // gone already
  }
}

TEST_F(BatchTurnsTest, APrefixChatTurnsShareIsNotReleasedByABatch) {
  metrics::Registry registry;
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto engine = MakeEngine(store.get(), &registry);
  const std::vector<int32_t> prefix = Tokens(160, 2);
  // A chat turn shares the same system part (long enough to be shared): it lasts.
  TurnRequest chat = BatchTurn(0, prefix, 8, 4);
  chat.batch = false;
  chat.key = {"t", "chat"};
  ASSERT_TRUE(RunAll(*engine, {chat})[0].status.ok());
  ASSERT_TRUE(RunAll(*engine, {BatchTurn(1, prefix, 8, 4)})[0].status.ok());
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  EXPECT_FALSE(engine->ReleaseBatchPrefix("t", prefix));
  auto prompts = engine->ListSystemPrompts("t");
  ASSERT_EQ(prompts.size(), 1u);
  EXPECT_TRUE(prompts[0].resident);
  EXPECT_TRUE(prompts[0].stored);  // the chat turn's prompt is stored once
}

TEST_F(BatchTurnsTest, ChatTurnsGoAheadOfQueuedBatchTurns) {
  // Two running slots, one kept for chat: batch turns run one at a time, and a chat turn
  // sent after six of them starts at once and ends long before the batch does. The first
  // step waits until all are queued.
  testing::GatedBackend* gate = nullptr;
  auto engine = MakeEngine(nullptr, nullptr, /*max_running=*/2, /*reserved=*/1, /*batch_pool=*/0, &gate);
  auto [batch, chat_stream] = BatchThenChat(*engine, 6, 40);
  gate->open.Notify();
  const TurnOutput chat_out = Collect(chat_stream);
  ASSERT_TRUE(chat_out.status.ok()) << chat_out.status;
  // The chat turn, sent last, drew its first token before any batch turn queued behind the
  // running one did (those wait for its 40 steps): by the steps' order, not by timing.
  for (size_t i = 1; i < batch.size(); ++i) {
    const TurnOutput out = Collect(batch[i]);
    ASSERT_TRUE(out.status.ok()) << out.status;
    EXPECT_LT(chat_out.result.ttft_ms, out.result.ttft_ms) << "batch turn " << i;
  }
  EXPECT_TRUE(Collect(batch[0]).status.ok());
}

TEST_F(BatchTurnsTest, BatchTurnsInAPoolOfTheirOwnRunBesideChatTurns) {
  // Two chat slots and a batch pool of eight: eight batch turns share one step, and a chat
  // turn still starts at once.
  // The first step waits (the gate) until every turn is queued: the loop cannot start the
  // first turns' steps before the last are submitted.
  testing::GatedBackend* gate = nullptr;
  auto engine = MakeEngine(nullptr, nullptr, /*max_running=*/2, /*reserved=*/1, /*batch_pool=*/8, &gate);
  auto [batch, chat_stream] = BatchThenChat(*engine, 8, 24);
  gate->open.Notify();
  EXPECT_TRUE(Collect(chat_stream).status.ok());
  for (auto& s : batch) EXPECT_TRUE(Collect(s).status.ok());
  EXPECT_GE(engine->Stats().max_batch_turns, 8);
}

}  // namespace
}  // namespace strata::engine
