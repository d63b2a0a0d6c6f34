// Shared system prompts in the engine (CPU backend): computed once and stored once, turns
// on them answer exactly as with the prompt computed inline and the cache off, sessions
// store only their own tokens, a restart loads the prompt from the SSD tier, and the
// registry's Register / Drop / List.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/metrics.h"
#include "engine/engine.h"
#include "engine/system_prompt_names.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "storage/testing/temp_dir.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::Count;
using testing::Exported;
using testing::RunAll;
using testing::HostOnlyStore;
using testing::SmallConfig;
using testing::TurnOutput;

// A system part of `n` tokens (printable bytes of the built-in tokenizer) for prompt `k`.
std::vector<int32_t> SystemPart(int n, int k) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 32 + (i * (7 + k) + 3 * k) % 90;
  return t;
}

TurnRequest Turn(const std::string& session, const std::vector<int32_t>& system, int own, int salt, int max_new) {
  TurnRequest r;
  r.key = {"t", session};
  r.prompt = system;
  for (int i = 0; i < own; ++i) r.prompt.push_back(32 + (i * 13 + salt * 5) % 90);
  r.system_tokens = static_cast<int64_t>(system.size());
  r.max_new_tokens = max_new;
  return r;
}

class SystemPromptEngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> MakeEngine(storage::SessionStore* store, metrics::Registry* registry = nullptr,
                                     int max_running = 64, int64_t hbm_bytes = -1) {
    return Make(CpuModel(), store, registry, max_running, hbm_bytes);
  }
  // An engine on the CPU model inside `Wrapper` (a test backend), which `*wrapper` points at.
  template <typename Wrapper>
  std::unique_ptr<Engine> MakeWrappedEngine(storage::SessionStore* store, Wrapper** wrapper, int max_running = 64) {
    auto backend = std::make_unique<Wrapper>(CpuModel(), "test-cpu");
    *wrapper = backend.get();
    return Make(std::move(backend), store, nullptr, max_running);
  }
  std::unique_ptr<model::CpuModel> CpuModel() const {
    return std::make_unique<model::CpuModel>(model::ModelWeights::Random(SmallConfig(), 99, tokenizer_.SilentTokens()));
  }
  std::unique_ptr<Engine> Make(std::unique_ptr<model::ModelBackend> model, storage::SessionStore* store,
                               metrics::Registry* registry, int max_running, int64_t hbm_bytes = -1) {
    EngineOptions options;
    options.hbm.capacity_bytes = hbm_bytes;
    options.min_shared_prompt_tokens = 64;
    options.warmup_tokens = 0;
    options.max_running = max_running;
    auto e = Engine::Create(options, std::move(model), &tokenizer_, store, registry);
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }
  uint64_t Fingerprint() const { return model::ModelWeights::Random(SmallConfig(), 99, {}).fingerprint(); }

  text::ByteTokenizer tokenizer_;
};

TEST_F(SystemPromptEngineTest, AnswersEqualThePromptInlineWithTheCacheOff) {
  // 24 sessions over three prompts, two turns each, against the same turns with the
  // cache off (every prompt computed inline).
  const std::vector<std::vector<int32_t>> prompts = {SystemPart(150, 1), SystemPart(90, 2), SystemPart(200, 3)};
  std::vector<TurnRequest> first, second;
  for (int s = 0; s < 24; ++s) {
    first.push_back(Turn("s" + std::to_string(s), prompts[s % 3], 10 + s, s, 6));
  }
  metrics::Registry registry;
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto shared = MakeEngine(store.get(), &registry);
  auto plain = MakeEngine(nullptr);
  const std::vector<TurnOutput> a = RunAll(*shared, first);
  const std::vector<TurnOutput> b = RunAll(*plain, first);
  for (int s = 0; s < 24; ++s) {
    ASSERT_TRUE(a[s].status.ok()) << a[s].status;
    EXPECT_EQ(a[s].tokens, b[s].tokens) << "session " << s;
    EXPECT_GE(a[s].result.usage.cached_tokens, static_cast<int64_t>(prompts[s % 3].size()))
        << "the shared prompt was not reused by session " << s;
  }
  ASSERT_TRUE(shared->AwaitIdle(absl::Seconds(30)));
  // Each prompt computed once and stored once; each session stores only its own tokens.
  EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "computed"}}), 3);
  EXPECT_EQ(Count(registry, "strata_system_prompt_hits_total", {}), 24);
  for (int s = 0; s < 24; ++s) {
    auto info = store->Get({"t", "s" + std::to_string(s)});
    ASSERT_TRUE(info.ok()) << info.status();
    // Its own prompt tokens and every answer token but the last (never fed back).
    EXPECT_EQ(info->cached_tokens, static_cast<int64_t>(first[s].prompt.size() - prompts[s % 3].size() +
                                                         a[s].tokens.size() - 1))
        << "session " << s << " stores more than its own tokens";
    EXPECT_EQ(info->base, absl::StrCat(SystemPromptId(prompts[s % 3]), "@", prompts[s % 3].size()))
        << "the base names the prompt and where the session's own tokens start";
  }
  auto listed = shared->ListSystemPrompts("t");
  ASSERT_EQ(listed.size(), 3u);
  for (const auto& p : listed) {
    EXPECT_TRUE(p.resident && p.stored) << p.id;
    EXPECT_EQ(p.running_turns, 0);
  }
  EXPECT_TRUE(shared->ListSystemPrompts("other").empty()) << "another tenant's prompts";

  // Second turns: the conversation resent whole, grown by the answer and a new message.
  for (int s = 0; s < 24; ++s) {
    TurnRequest t = first[s];
    t.prompt.insert(t.prompt.end(), a[s].tokens.begin(), a[s].tokens.end());
    for (int i = 0; i < 5; ++i) t.prompt.push_back(40 + i + s % 7);
    second.push_back(t);
  }
  const std::vector<TurnOutput> a2 = RunAll(*shared, second);
  const std::vector<TurnOutput> b2 = RunAll(*plain, second);
  for (int s = 0; s < 24; ++s) {
    ASSERT_TRUE(a2[s].status.ok()) << a2[s].status;
    EXPECT_EQ(a2[s].tokens, b2[s].tokens) << "session " << s << ", turn 2";
    EXPECT_GE(a2[s].result.usage.cached_tokens, static_cast<int64_t>(first[s].prompt.size()))
        << "turn 2 of session " << s << " did not reuse its own history";
  }
  EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "computed"}}), 3) << "recomputed";
}

TEST_F(SystemPromptEngineTest, AfterARestartThePromptIsLoadedFromTheSsdTier) {
  storage::testing::TempDir dir("strata-prompt-restart");
  std::filesystem::create_directories(dir.path() + "/ssd");
  auto make_store = [&] {
    storage::SessionStoreOptions so;
    so.layout = Engine::ChunkLayoutFor(SmallConfig(), 16);
    so.host_capacity_bytes = int64_t{16} << 20;
    so.model_fingerprint = Fingerprint();
    so.ssd_dirs = {dir.path() + "/ssd"};
    so.ssd_capacity_bytes_per_dir = int64_t{32} << 20;
    so.index_dir = dir.path() + "/index";
    so.ssd_read_bytes_per_second = 1e9;
    return *storage::SessionStore::Create(so);
  };
  const std::vector<int32_t> system = SystemPart(120, 4);
  std::vector<TurnOutput> before;
  {
    auto store = make_store();
    auto engine = MakeEngine(store.get());
    before = RunAll(*engine, {Turn("a", system, 20, 1, 5)});
    ASSERT_TRUE(before[0].status.ok()) << before[0].status;
    ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
    ASSERT_TRUE(store->AwaitWriteBacks(absl::Seconds(30)).ok());
  }
  metrics::Registry registry;
  auto store = make_store();
  auto engine = MakeEngine(store.get(), &registry);
  auto listed = engine->ListSystemPrompts("t");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].persisted);
  EXPECT_FALSE(listed[0].resident);
  // Counted as stored (on SSD: the restart's host tier is empty), by its chunks' bytes; the
  // session "a" stored on it is not a prompt.
  EXPECT_EQ(Exported(registry, "strata_system_prompts_stored{tier=\"ssd\"}"), 1);
  EXPECT_EQ(Exported(registry, "strata_system_prompts_stored{tier=\"host\"}"), 0);
  EXPECT_EQ(Exported(registry, "strata_system_prompt_stored_bytes"), static_cast<double>(listed[0].stored_bytes));
  EXPECT_GT(listed[0].stored_bytes, 0);
  // A new session on the same prompt: the prompt comes from the store, not computed.
  const std::vector<TurnOutput> after = RunAll(*engine, {Turn("b", system, 20, 1, 5)});
  ASSERT_TRUE(after[0].status.ok()) << after[0].status;
  EXPECT_EQ(after[0].tokens, before[0].tokens) << "same conversation, same answer";
  EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "stored"}}), 1);
  EXPECT_EQ(Count(registry, "strata_system_prompt_loads_total", {{"source", "computed"}}), 0);
  EXPECT_EQ(Exported(registry, "strata_system_prompts_stored{tier=\"host\"}"), 1) << "promoted to host to load";
}

TEST_F(SystemPromptEngineTest, RegisterDropAndList) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto engine = MakeEngine(store.get());
  const std::vector<int32_t> system = SystemPart(100, 5);
  auto id = engine->RegisterSystemPrompt("t", system);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(IsSystemPromptId(*id)) << *id;
  EXPECT_EQ(*engine->RegisterSystemPrompt("t", system), *id) << "registering is idempotent";
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  // Stored once, as the prompt's tokens, under the tenant's reserved session.
  EXPECT_EQ(store->Match(SystemPromptKey("t", *id), system, 1000).tokens, 100);
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("u", *id)).status())) << "another tenant's";
  EXPECT_TRUE(engine->ListSystemPrompts("u").empty()) << "another tenant's";
  auto listed = engine->ListSystemPrompts("t");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, *id);
  EXPECT_EQ(listed[0].tokens, 100);
  EXPECT_TRUE(listed[0].resident);
  EXPECT_TRUE(listed[0].stored);
  // Bad prompts change nothing.
  EXPECT_TRUE(absl::IsInvalidArgument(engine->RegisterSystemPrompt("t", {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(engine->RegisterSystemPrompt("t", {1, 99999}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(engine->RegisterSystemPrompt("t", SystemPart(600, 1)).status()));
  EXPECT_EQ(engine->ListSystemPrompts("t").size(), 1u);

  // A turn running on it when it is dropped finishes; then the id is gone.
  auto running = engine->Submit(Turn("s", system, 10, 1, 40));
  ASSERT_TRUE(running.ok());
  TurnStream::Event first;
  ASSERT_TRUE((*running)->Next(&first, absl::Seconds(30)));
  ASSERT_TRUE(engine->DropSystemPrompt("t", *id).ok());
  TurnOutput rest = Collect(*running);
  EXPECT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(static_cast<int>(first.token_ids.size() + rest.tokens.size()), 40);
  EXPECT_TRUE(absl::IsNotFound(engine->DropSystemPrompt("t", *id)));
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("t", *id)).status()));
  EXPECT_TRUE(engine->ListSystemPrompts("t").empty());
  EXPECT_TRUE(absl::IsNotFound(engine->DropSystemPrompt("t", SystemPromptId({1, 2, 3}))));
  // Unknown ids, and another tenant's, change nothing: no drop is remembered for them.
  const size_t remembered = engine->RememberedPromptDropsForTesting();
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(absl::IsNotFound(engine->DropSystemPrompt("t", SystemPromptId({i, i + 1}))));
    EXPECT_TRUE(absl::IsNotFound(engine->DropSystemPrompt("u", *id)));
  }
  EXPECT_EQ(engine->RememberedPromptDropsForTesting(), remembered);
  // One the caller registered, though nothing of it is held: remembered for the turns queued on it.
  EXPECT_TRUE(absl::IsNotFound(engine->DropSystemPrompt("t", SystemPromptId({7, 7}), /*known=*/true)));
  EXPECT_EQ(engine->RememberedPromptDropsForTesting(), remembered + 1);
}

// A prompt too short to share is named, not shared: nothing computed, held or stored, and
// its turns compute it inline.
TEST_F(SystemPromptEngineTest, APromptTooShortToShareIsOnlyNamed) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto engine = MakeEngine(store.get());
  auto plain = MakeEngine(nullptr);
  const std::vector<int32_t> system = SystemPart(50, 9);  // min_shared_prompt_tokens is 64
  EXPECT_FALSE(engine->SharesSystemPrompt(50));
  EXPECT_TRUE(engine->SharesSystemPrompt(64));
  auto id = engine->RegisterSystemPrompt("t", system);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, SystemPromptId(system));
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("t", *id)).status())) << "stored";
  EXPECT_TRUE(engine->ListSystemPrompts("t").empty()) << "held";
  const TurnOutput out = RunAll(*engine, {Turn("s", system, 8, 1, 4)})[0];
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.result.usage.cached_tokens, 0);
  EXPECT_EQ(out.tokens, RunAll(*plain, {Turn("s", system, 8, 1, 4)})[0].tokens);
}

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
TEST_F(SystemPromptEngineTest, APromptBuiltForABatchIsStoredOnceRegistered) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto engine = MakeEngine(store.get());
  const std::vector<int32_t> system = SystemPart(100, 10);
  TurnRequest batch = Turn("\x01" "batch/0", system, 6, 1, 3);
  batch.batch = true;
  const TurnOutput b = RunAll(*engine, {batch})[0];
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_GE(b.result.usage.cached_tokens, 100) << "ran on the prompt built for it";
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  const std::string id = SystemPromptId(system);
  EXPECT_TRUE(absl::IsNotFound(store->Get(SystemPromptKey("t", id)).status())) << "a batch's prefix is not stored";
  ASSERT_EQ(*engine->RegisterSystemPrompt("t", system), id);
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  auto stored = store->Get(SystemPromptKey("t", id));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->cached_tokens, 100);
  // Turns on it go on as before.
  const TurnOutput c = RunAll(*engine, {Turn("c", system, 8, 3, 4)})[0];
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_GE(c.result.usage.cached_tokens, 100);
}

// Turns on a prompt in KV memory read it from there, not from the store, yet its stored
// copy is in use: each refreshes the copy's last access (its TTL and its place in the LRU).
TEST_F(SystemPromptEngineTest, TurnsOnAPromptInMemoryKeepItsStoredCopyFresh) {
  auto store = HostOnlyStore(SmallConfig(), Fingerprint());
  auto engine = MakeEngine(store.get());
  const std::vector<int32_t> system = SystemPart(100, 8);
  auto id = engine->RegisterSystemPrompt("t", system);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
  const storage::SessionKey key = SystemPromptKey("t", *id);
  auto stored = store->Get(key);
  ASSERT_TRUE(stored.ok()) << stored.status();
  const int64_t saved_at = stored->last_access_unix_ms;
  absl::SleepFor(absl::Milliseconds(20));
  const int64_t before_turn = absl::ToUnixMillis(absl::Now());
  const TurnOutput out = RunAll(*engine, {Turn("s", system, 8, 1, 3)})[0];
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_GE(out.result.usage.cached_tokens, 100) << "ran on the prompt in memory";
  stored = store->Get(key);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_GT(stored->last_access_unix_ms, saved_at);
  EXPECT_GE(stored->last_access_unix_ms, before_turn);
}

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

TEST_F(SystemPromptEngineTest, WithoutTheCacheNothingIsSharedAndTheAnswerIsTheSame) {
  auto engine = MakeEngine(nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(engine->RegisterSystemPrompt("t", SystemPart(100, 1)).status()));
  const std::vector<TurnOutput> out = RunAll(*engine, {Turn("s", SystemPart(100, 1), 8, 1, 4)});
  ASSERT_TRUE(out[0].status.ok());
  EXPECT_EQ(out[0].result.usage.cached_tokens, 0);
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
  auto make_store = [&] {
    storage::SessionStoreOptions so;
    so.layout = layout;
    so.host_capacity_bytes = int64_t{16} << 20;
    so.model_fingerprint = Fingerprint();
    so.ssd_dirs = {dir.path() + "/ssd"};
    so.ssd_capacity_bytes_per_dir = int64_t{32} << 20;
    so.index_dir = dir.path() + "/index";
    so.ssd_read_bytes_per_second = 1e9;
    return *storage::SessionStore::Create(so);
  };
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

TEST_F(SystemPromptEngineTest, ASystemPartAsLongAsThePromptIsRefused) {
  auto engine = MakeEngine(nullptr);
  TurnRequest t = Turn("s", SystemPart(100, 1), 0, 1, 4);
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Submit(t).status()));
}

}  // namespace
}  // namespace strata::engine
