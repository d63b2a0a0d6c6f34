// Shared system prompts in the engine under faults and races (CPU backend): a prompt
// dropped while its save starts, or while turns on it run or wait, stays dropped and
// counts them right; a session whose system part changed, a stored prompt found corrupt,
// and a record from before the base named its start never reach an answer with wrong KV.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/metrics.h"
#include "engine/engine.h"
#include "engine/system_prompt_names.h"
#include "engine/testing/engine_testing.h"
#include "engine/testing/system_prompt_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "storage/testing/forwarding_store.h"
#include "storage/testing/temp_dir.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::Count;
using testing::Exported;
using testing::HostOnlyStore;
using testing::RunAll;
using testing::SmallConfig;
using testing::SsdStore;
using testing::SystemPart;
using testing::SystemPromptEngineTest;
using testing::Turn;
using testing::TurnOutput;

// Holds the engine loop in the first copy of KV to the store, once armed.
class SaveGateBackend final : public testing::CpuBackendWrapper {
 public:
  using CpuBackendWrapper::CpuBackendWrapper;
  absl::Status SaveKv(const model::SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                      const storage::ChunkLayout& layout) override {
    if (armed && !entered.HasBeenNotified()) {
      entered.Notify();
      open.WaitForNotification();
    }
    return CpuBackendWrapper::SaveKv(seq, begin, count, payload, layout);
  }
  std::atomic<bool> armed{false};
  absl::Notification entered, open;
};

// The backend fails to start one round's KV loads, once armed.
class StartLoadsFailsOnce final : public testing::CpuBackendWrapper {
 public:
  using CpuBackendWrapper::CpuBackendWrapper;
  absl::StatusOr<uint64_t> StartKvTransfers() override {
    if (armed.exchange(false)) return absl::ResourceExhaustedError("no staging buffers (injected)");
    return CpuBackendWrapper::StartKvTransfers();
  }
  std::atomic<bool> armed{false};
};

// A returning session on a shared prompt whose history load cannot start computes its own
// tokens after the prompt, which stays in its sequence: its answer and a bystander's in
// the same step are those of a cache-off engine (before, the step failed for both: the
// turn started at position 0, inside the shared prefix).
TEST_F(SystemPromptEngineTest, AFailedLoadStartOnAPromptedTurnRecomputesItsOwnTokensOnly) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto backend = std::make_unique<StartLoadsFailsOnce>(CpuModel(), "cpu");
  StartLoadsFailsOnce* fails = backend.get();
  auto engine = Make(std::move(backend), store.get(), nullptr, 64, /*hbm_bytes=*/0);
  const std::vector<int32_t> system = SystemPart(100, 3);
  ASSERT_TRUE(engine->RegisterSystemPrompt("t", system).ok());
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  TurnRequest first = Turn("s", system, 40, 1, 4);
  auto one = RunAll(*engine, {first});
  ASSERT_TRUE(one[0].status.ok()) << one[0].status;
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  TurnRequest second = first;
  second.prompt.insert(second.prompt.end(), one[0].tokens.begin(), one[0].tokens.end());
  for (int i = 0; i < 20; ++i) second.prompt.push_back(40 + i);
  TurnRequest bystander = Turn("x", SystemPart(10, 9), 30, 2, 4);
  bystander.system_tokens = 0;
  fails->armed = true;
  auto two = RunAll(*engine, {second, bystander});
  EXPECT_FALSE(fails->armed.load()) << "no load was started";
  auto plain = Make(std::make_unique<testing::CpuBackendWrapper>(CpuModel(), "cpu"), nullptr, nullptr, 64, 0);
  auto want = RunAll(*plain, {second, bystander});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(two[i].status.ok()) << i << ": " << two[i].status;
    EXPECT_EQ(two[i].tokens, want[i].tokens) << i;
  }
  EXPECT_EQ(two[0].result.usage.cached_tokens, 100) << "the prompt's KV, and nothing loaded";
}

// With no idle prompts kept, a prompt brought into KV memory for the turns waiting on it
// stays until they start on it (it was evicted at once, and brought back, for ever).
TEST_F(SystemPromptEngineTest, NoIdlePromptsKeptStillServesTheTurnsThatWaitForOne) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  EngineOptions options;
  options.min_shared_prompt_tokens = 64;
  options.warmup_tokens = 0;
  options.max_idle_shared_prompts = 0;
  metrics::Registry registry;
  auto engine = Engine::Create(options, CpuModel(), &tokenizer_, store.get(), &registry);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> system = SystemPart(100, 1);
  auto out = RunAll(**engine, {Turn("a", system, 10, 1, 3), Turn("b", system, 10, 2, 3)});
  for (const TurnOutput& o : out) {
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.result.usage.cached_tokens, 100);
  }
  EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "stored"}}) +
                Count(registry, "strata_system_prompt_loads_total", {{"source", "computed"}}),
            1)
      << "the prompt went and came back";
}

// Forward fails once armed (a device fault in the middle of a prompt job).
class ForwardFailsBackend final : public testing::CpuBackendWrapper {
 public:
  using CpuBackendWrapper::CpuBackendWrapper;
  absl::Status Forward(absl::Span<const model::ForwardEntry> batch) override {
    if (armed) return absl::InternalError("the step failed (injected)");
    return CpuBackendWrapper::Forward(batch);
  }
  std::atomic<bool> armed{false};
};

// A prefix a batch built (in KV memory only) is registered, which brings it in anew to be
// stored; that job fails: the prompt gauges say no prompt is resident (they said one).
TEST_F(SystemPromptEngineTest, PromptGaugesFollowARegisteredBatchPrefixWhoseJobFails) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  metrics::Registry registry;
  auto backend = std::make_unique<ForwardFailsBackend>(CpuModel(), "cpu");
  ForwardFailsBackend* fails = backend.get();
  auto engine = Make(std::move(backend), store.get(), &registry, 64);
  const std::vector<int32_t> system = SystemPart(100, 6);
  TurnRequest batch = Turn("\x01" "batch/0", system, 8, 1, 4);
  batch.batch = true;
  ASSERT_TRUE(RunAll(*engine, {batch})[0].status.ok());
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  ASSERT_EQ(Exported(registry, "strata_system_prompts"), 1) << "the batch's prefix is resident";
  fails->armed = true;
  ASSERT_TRUE(engine->RegisterSystemPrompt("t", system).ok());
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  EXPECT_EQ(Exported(registry, "strata_system_prompts"), 0);
  EXPECT_EQ(Exported(registry, "strata_system_prompt_bytes"), 0);
}

// Runs `after_drop` once, right after the store drops something.
class DropHookStore final : public storage::testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  absl::Status Drop(const storage::SessionKey& key) override {
    absl::Status dropped = ForwardingStore::Drop(key);
    if (after_drop) std::exchange(after_drop, nullptr)();
    return dropped;
  }
  std::function<void()> after_drop;
};

// A prompt only the store holds (never registered, recognised from messages; after a
// restart) is dropped: a turn that arrived before the drop and reaches the engine while the
// drop is in the store computes the prompt inline, and brings nothing back.
TEST_F(SystemPromptEngineTest, ATurnFromBeforeADropOfAStoredPromptDoesNotBringItBack) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  const std::vector<int32_t> system = SystemPart(100, 4);
  const std::string id = SystemPromptId(system);
  {
    auto first = MakeEngine(store.get());
    ASSERT_TRUE(RunAll(*first, {Turn("a", system, 10, 1, 3)})[0].status.ok());
    ASSERT_TRUE(first->AwaitIdle(absl::Seconds(30)));
  }
  ASSERT_TRUE(store->Get(SystemPromptKey("t", id)).ok()) << "stored by the first engine";
  DropHookStore hook(store.get());
  auto engine = MakeEngine(&hook);  // stored, not in KV memory
  TurnRequest before = Turn("b", system, 12, 2, 4);  // stamped before the drop
  absl::SleepFor(absl::Milliseconds(5));
  TurnOutput out;
  hook.after_drop = [&] {
    auto stream = engine->Submit(before);
    ASSERT_TRUE(stream.ok()) << stream.status();
    out = Collect(*stream);
    ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  };
  ASSERT_TRUE(engine->DropSystemPrompt("t", id).ok());
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  EXPECT_EQ(out.result.usage.cached_tokens, 0) << "the turn from before the drop ran on the prompt";
  EXPECT_TRUE(engine->ListSystemPrompts("t").empty()) << "a turn from before the drop brought it back";
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("t", id)).status())) << "stored again after the drop";
  EXPECT_TRUE(absl::IsNotFound(engine->DropSystemPrompt("t", "unknown-id"))) << "an unknown id";
}

// A prompt dropped while its KV is being saved is not brought back by the save.
TEST_F(SystemPromptEngineTest, APromptDroppedWhileItsSaveStartsStaysDropped) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  SaveGateBackend* gate = nullptr;
  auto engine = MakeWrappedEngine(store.get(), &gate);
  const std::vector<int32_t> system = SystemPart(100, 11);
  gate->armed = true;
  auto id = engine->RegisterSystemPrompt("t", system);
  ASSERT_TRUE(id.ok());
  gate->entered.WaitForNotification();  // the prompt job's save has started
  // The drop takes the prompt out of memory at once; its store part waits for the save's
  // copy (the store is busy with it), then finds it there or not yet.
  absl::Status dropped;
  std::thread drop([&] { dropped = engine->DropSystemPrompt("t", *id); });
  absl::SleepFor(absl::Milliseconds(50));
  gate->open.Notify();
  drop.join();
  EXPECT_TRUE(dropped.ok()) << dropped;
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("t", *id)).status())) << "the save brought it back";
  EXPECT_TRUE(engine->ListSystemPrompts("t").empty());
}

// The same with the drop between the prompt job's end (which decides to save it) and its
// save's start: the landed save is dropped again.
TEST_F(SystemPromptEngineTest, APromptDroppedBeforeItsSaveStartsStaysDropped) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto engine = MakeEngine(store.get());
  const std::vector<int32_t> system = SystemPart(100, 12);
  const std::string id = SystemPromptId(system);
  absl::Status dropped = absl::UnknownError("not dropped");
  engine->SetBeforePromptSaveForTesting([&] { dropped = engine->DropSystemPrompt("t", id); });
  ASSERT_EQ(*engine->RegisterSystemPrompt("t", system), id);
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(dropped.ok()) << dropped;
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("t", id)).status())) << "the save brought it back";
  EXPECT_TRUE(engine->ListSystemPrompts("t").empty());
}

// A prompt first built for a batch lives in KV memory only; registered, it is stored too.
// Holds the engine loop in its first step (armed_first), and in the first step whose batch
// has a single entry once armed_lone.
class TwoGateBackend final : public testing::CpuBackendWrapper {
 public:
  using CpuBackendWrapper::CpuBackendWrapper;
  absl::Status Forward(absl::Span<const model::ForwardEntry> batch) override {
    if (armed_first && !first_entered.HasBeenNotified()) {
      first_entered.Notify();
      first_open.WaitForNotification();
    }
    if (armed_lone && batch.size() == 1 && !lone_entered.HasBeenNotified()) {
      lone_entered.Notify();
      lone_open.WaitForNotification();
    }
    return inner().Forward(batch);
  }
  std::atomic<bool> armed_first{false}, armed_lone{false};
  absl::Notification first_entered, first_open, lone_entered, lone_open;
};

// A turn that ran on a prompt dropped and shared again meanwhile counts itself off the
// prompt it ran on, not the new one: the new one's running turns stay counted (and it stays
// in memory while they run).
TEST_F(SystemPromptEngineTest, ATurnOnADroppedPromptDoesNotUncountTheTurnsOnItsSuccessor) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  TwoGateBackend* gate = nullptr;
  auto engine = MakeWrappedEngine(store.get(), &gate, /*max_running=*/4);
  const std::vector<int32_t> system = SystemPart(100, 7);
  auto id = engine->RegisterSystemPrompt("t", system);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  gate->armed_first = true;
  auto a = engine->Submit(Turn("a", system, 10, 1, 60));  // on the registered prompt
  ASSERT_TRUE(a.ok());
  gate->first_entered.WaitForNotification();
  ASSERT_TRUE(engine->DropSystemPrompt("t", *id).ok());
  auto b = engine->Submit(Turn("b", system, 12, 2, 300));  // after the drop: shares it anew
  ASSERT_TRUE(b.ok());
  gate->first_open.Notify();
  TurnStream::Event first;
  ASSERT_TRUE((*b)->Next(&first, absl::Seconds(30)));  // b runs, beside a
  gate->armed_lone = true;  // the first step after a ended
  gate->lone_entered.WaitForNotification();
  const TurnOutput out_a = Collect(*a);
  ASSERT_TRUE(out_a.status.ok()) << out_a.status;
  EXPECT_EQ(static_cast<int>(out_a.tokens.size()), 60);
  auto listed = engine->ListSystemPrompts("t");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].running_turns, 1) << "a's end counted b off the prompt shared again";
  EXPECT_TRUE(listed[0].resident);
  gate->lone_open.Notify();
  const TurnOutput out_b = Collect(*b);
  ASSERT_TRUE(out_b.status.ok()) << out_b.status;
  EXPECT_GE(out_b.result.usage.cached_tokens, 96) << "b ran on the prompt shared again";
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  listed = engine->ListSystemPrompts("t");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].running_turns, 0);
}

// A turn queued before its prompt was dropped runs (computing the prompt inline) and does
// not bring the prompt back; a turn sent after the drop shares it anew.
TEST_F(SystemPromptEngineTest, TurnsQueuedBeforeADropDoNotBringThePromptBack) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto plain = MakeEngine(nullptr);
  EngineOptions options;
  options.min_shared_prompt_tokens = 64;
  options.warmup_tokens = 0;
  options.max_running = 1;
  auto backend = std::make_unique<testing::GatedBackend>(
      std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer_.SilentTokens())),
      /*armed=*/false);
  testing::GatedBackend* gate = backend.get();
  auto engine = *Engine::Create(options, std::move(backend), &tokenizer_, store.get(), nullptr);
  const std::vector<int32_t> system = SystemPart(100, 6);
  auto id = engine->RegisterSystemPrompt("t", system);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  gate->arm();
  auto running = engine->Submit(Turn("a", system, 10, 1, 30));
  ASSERT_TRUE(running.ok());
  gate->entered.WaitForNotification();  // its step holds the engine loop
  auto queued = engine->Submit(Turn("b", system, 12, 2, 5));  // waits: one turn at a time
  ASSERT_TRUE(queued.ok());
  ASSERT_TRUE(engine->DropSystemPrompt("t", *id).ok());
  gate->open.Notify();
  EXPECT_TRUE(Collect(*running).status.ok());
  const TurnOutput b = Collect(*queued);
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(b.result.usage.cached_tokens, 0) << "computed inline";
  EXPECT_EQ(b.tokens, RunAll(*plain, {Turn("b", system, 12, 2, 5)})[0].tokens);
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(engine->ListSystemPrompts("t").empty()) << "a turn from before the drop brought it back";
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("t", *id)).status()));
  // Sent after the drop: shared again (its content names it).
  const TurnOutput c = RunAll(*engine, {Turn("c", system, 8, 3, 4)})[0];
  ASSERT_TRUE(c.status.ok());
  EXPECT_GE(c.result.usage.cached_tokens, 100);
  EXPECT_EQ(engine->ListSystemPrompts("t").size(), 1u);
}

TEST_F(SystemPromptEngineTest, ASessionWhoseSystemPromptChangedReusesNoneOfItsOldKv) {
  // A session's own tokens were computed after its prompt: a later turn that resends them
  // after another system part (as long, so every position is the same) must not take their
  // KV, from KV memory (the HBM tier) or from the store. It answers as the cache-off engine.
  const std::vector<int32_t> p1 = SystemPart(150, 1), p2 = SystemPart(150, 5);
  ASSERT_NE(p1, p2);
  for (const bool hbm : {true, false}) {
    auto store = HostOnlyStore(SmallConfig(), Fingerprint());
    auto shared = MakeEngine(store.get(), nullptr, 64, hbm ? -1 : 0);
    auto plain = MakeEngine(nullptr);
    const TurnRequest first = Turn("a", p1, 30, 1, 6);
    const std::vector<TurnOutput> a = RunAll(*shared, {first});
    ASSERT_TRUE(a[0].status.ok()) << a[0].status;
    ASSERT_TRUE(shared->AwaitIdle(absl::Seconds(30)));
    ASSERT_TRUE(store->AwaitWriteBacks(absl::Seconds(30)).ok());
    // The same history on p1 is reused (the check that reuse happens at all here) ...
    auto resend = [&](const std::vector<int32_t>& system) {
      TurnRequest t = Turn("a", system, 30, 1, 6);
      t.prompt.insert(t.prompt.end(), a[0].tokens.begin(), a[0].tokens.end());
      for (int i = 0; i < 5; ++i) t.prompt.push_back(40 + i);
      return t;
    };
    const std::string mode = hbm ? "with the HBM tier" : "from the store";
    // ... on p2 none of it is, and the answer is the cache-off engine's.
    const std::vector<TurnOutput> got = RunAll(*shared, {resend(p2)});
    const std::vector<TurnOutput> want = RunAll(*plain, {resend(p2)});
    ASSERT_TRUE(got[0].status.ok()) << got[0].status;
    EXPECT_EQ(got[0].tokens, want[0].tokens) << mode;
    EXPECT_LE(got[0].result.usage.cached_tokens, static_cast<int64_t>(p2.size()))
        << mode << ": KV computed after another prompt was reused";
    ASSERT_TRUE(shared->AwaitIdle(absl::Seconds(30)));
    ASSERT_TRUE(store->AwaitWriteBacks(absl::Seconds(30)).ok());
    // Back on p1: the turn on p2 replaced the session's history, so nothing of it either.
    const std::vector<TurnOutput> back = RunAll(*shared, {resend(p1)});
    const std::vector<TurnOutput> back_want = RunAll(*plain, {resend(p1)});
    ASSERT_TRUE(back[0].status.ok()) << back[0].status;
    EXPECT_EQ(back[0].tokens, back_want[0].tokens) << mode;
    EXPECT_LE(back[0].result.usage.cached_tokens, static_cast<int64_t>(p1.size())) << mode;
  }
}

TEST_F(SystemPromptEngineTest, APromptWhoseStoredChunksAreCorruptIsComputedAgain) {
  // After a restart every chunk on SSD is damaged (a flipped payload byte each): the prompt
  // and the session stored on it are never served from them. A new session on the prompt
  // computes it again and answers as before; the old session's next turn answers as the
  // cache-off engine; the prompt is stored anew.
  storage::testing::TempDir dir("strata-prompt-corrupt");
  std::filesystem::create_directories(dir.path() + "/ssd");
  const storage::ChunkLayout layout = Engine::ChunkLayoutFor(SmallConfig(), 16);
  auto make_store = [&] { return SsdStore(dir.path(), Fingerprint()); };
  const std::vector<int32_t> system = SystemPart(120, 4);
  const TurnRequest first = Turn("a", system, 20, 1, 5);
  std::vector<TurnOutput> before;
  {
    auto store = make_store();
    auto engine = MakeEngine(store.get());
    before = RunAll(*engine, {first});
    ASSERT_TRUE(before[0].status.ok()) << before[0].status;
    ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
    ASSERT_TRUE(store->AwaitWriteBacks(absl::Seconds(30)).ok());
  }
  {
    std::fstream data(dir.path() + "/ssd/strata-ssd.data", std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(data.is_open());
    data.seekg(0, std::ios::end);
    const int64_t blocks = static_cast<int64_t>(data.tellg()) / layout.BlockBytes();
    ASSERT_GT(blocks, 0);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = b * layout.BlockBytes() + storage::kChunkHeaderBytes + 7;
      char byte = 0;
      data.seekg(at);
      data.read(&byte, 1);
      byte = static_cast<char>(byte ^ 0x20);
      data.seekp(at);
      data.write(&byte, 1);
    }
    ASSERT_TRUE(data.good());
  }
  metrics::Registry registry;
  auto store = make_store();
  auto engine = MakeEngine(store.get(), &registry);
  auto plain = MakeEngine(nullptr);
  const std::vector<TurnOutput> after = RunAll(*engine, {Turn("b", system, 20, 1, 5)});
  ASSERT_TRUE(after[0].status.ok()) << after[0].status;
  EXPECT_EQ(after[0].tokens, before[0].tokens) << "same conversation, same answer";
  EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "computed"}}), 1);
  EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "stored"}}), 0);
  EXPECT_GE(store->Stats().corrupt_chunks, 1);
  TurnRequest again = first;
  again.prompt.insert(again.prompt.end(), before[0].tokens.begin(), before[0].tokens.end());
  for (int i = 0; i < 4; ++i) again.prompt.push_back(50 + i);
  const std::vector<TurnOutput> got = RunAll(*engine, {again});
  const std::vector<TurnOutput> want = RunAll(*plain, {again});
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(got[0].tokens, want[0].tokens) << "the session's damaged history reached its answer";
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  auto listed = engine->ListSystemPrompts("t");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].stored) << "stored anew";
}

TEST_F(SystemPromptEngineTest, ARecordWhoseOwnTokensStartElsewhereIsNotReused) {
  // A record named by the prompt's id alone is from before a base named where the session's
  // own tokens start (CUDA sequences then shared whole pages: a record's first tokens were
  // the prompt's last, at other positions). Tokens that happen to equal the turn's own would
  // otherwise serve KV computed at other positions: it never matches; the turn computes.
  const std::vector<int32_t> system = SystemPart(150, 2);
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto engine = MakeEngine(store.get(), nullptr, 64, /*hbm_bytes=*/0);
  auto plain = MakeEngine(nullptr);
  const TurnRequest turn = Turn("old", system, 40, 3, 6);
  const std::vector<int32_t> own(turn.prompt.begin() + static_cast<std::ptrdiff_t>(system.size()), turn.prompt.end());
  ASSERT_TRUE(store
                  ->Save(turn.key, own, 0, [](int64_t, int, absl::Span<std::byte> p) { std::memset(p.data(), 0x3c, p.size()); },
                         SystemPromptId(system))
                  .ok());
  const std::vector<TurnOutput> got = RunAll(*engine, {turn});
  const std::vector<TurnOutput> want = RunAll(*plain, {turn});
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(got[0].tokens, want[0].tokens);
  EXPECT_EQ(got[0].result.usage.cached_tokens, static_cast<int64_t>(system.size())) << "the old record was reused";
}

}  // namespace
}  // namespace strata::engine
