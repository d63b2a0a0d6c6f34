// Shared system prompts in the engine (CPU backend): computed once and stored once, turns
// on them answer exactly as with the prompt computed inline and the cache off, sessions
// store only their own tokens, a restart loads the prompt from the SSD tier, and the
// registry's Register / Drop / List.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/metrics.h"
#include "engine/engine.h"
#include "engine/system_prompt_names.h"
#include "engine/testing/engine_testing.h"
#include "engine/testing/system_prompt_testing.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::Count;
using testing::Exported;
using testing::RunAll;
using testing::HostOnlyStore;
using testing::SmallConfig;
using testing::SsdStore;
using testing::SystemPart;
using testing::SystemPromptEngineTest;
using testing::Turn;
using testing::TurnOutput;


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
  auto make_store = [&] { return SsdStore(dir.path(), Fingerprint()); };
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

TEST_F(SystemPromptEngineTest, WithoutTheCacheNothingIsSharedAndTheAnswerIsTheSame) {
  auto engine = MakeEngine(nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(engine->RegisterSystemPrompt("t", SystemPart(100, 1)).status()));
  const std::vector<TurnOutput> out = RunAll(*engine, {Turn("s", SystemPart(100, 1), 8, 1, 4)});
  ASSERT_TRUE(out[0].status.ok());
  EXPECT_EQ(out[0].result.usage.cached_tokens, 0);
}

TEST_F(SystemPromptEngineTest, ASystemPartAsLongAsThePromptIsRefused) {
  auto engine = MakeEngine(nullptr);
  TurnRequest t = Turn("s", SystemPart(100, 1), 0, 1, 4);
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Submit(t).status()));
}

}  // namespace
}  // namespace strata::engine
