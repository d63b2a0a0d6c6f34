// The engine on the CUDA backend: turns with the session cache equal turns without (one
// conversation, and 64 sessions at once with their histories loaded from the host tier
// beside the steps, resident in HBM, or with the transfer streams slowed on purpose), and
// sampled turns reproduce. Skips, saying so, without a GPU.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/metrics.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "kernels/testing/delay.h"
#include "gtest/gtest.h"
#include "model/cuda/cuda_model.h"
#include "text/tokenizer.h"

namespace strata::engine {
namespace {

using model::CudaModel;
using model::CudaModelOptions;
using model::ModelConfig;
using model::ModelWeights;
using text::ByteTokenizer;
using text::ChatMessage;

class CudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaModel::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU engine tests skipped";
  }
};

struct Conversation {
  std::vector<std::vector<int32_t>> answers;
  std::vector<int64_t> cached;
};

Conversation RunConversation(bool cache, float temperature, const char* salt) {
  ByteTokenizer tokenizer;
  Conversation out;
  CudaModelOptions o;
  o.kv_pool_bytes = 64 << 20;
  o.initial_step_tokens = 256;
  auto model = CudaModel::Create(ModelWeights::Random(ModelConfig::Builtin(), 77, tokenizer.SilentTokens()), o);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  std::unique_ptr<storage::SessionStore> store;
  if (cache) {
    storage::SessionStoreOptions so;
    so.layout = model::ChunkLayoutFor(**model, 16);
    so.host_capacity_bytes = 64 << 20;
    so.model_fingerprint = (*model)->fingerprint();
    store = *storage::SessionStore::Create(so);
  }
  auto engine = Engine::Create({}, *std::move(model), &tokenizer, store.get(), nullptr);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return out;
  std::vector<ChatMessage> conv;
  for (std::string user : {"Hello there, strata.", "Tell me more about caches.", "Thanks!"}) {
    conv.push_back({"user", user + " " + salt});
    TurnRequest r;
    r.key = {"t", "s"};
    r.prompt = *tokenizer.RenderChat(conv);
    r.max_new_tokens = 24;
    r.sampling.temperature = temperature;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 7;
    auto stream = (*engine)->Submit(std::move(r));
    EXPECT_TRUE(stream.ok());
    if (!stream.ok()) return out;
    std::vector<int32_t> tokens;
    std::string text;
    TurnStream::Event e;
    int64_t cached = 0;
    while ((*stream)->Next(&e, absl::Seconds(60))) {
      EXPECT_TRUE(e.error.ok()) << e.error;
      tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
      text += e.text;
      if (e.done) cached = e.done->usage.cached_tokens;
    }
    out.answers.push_back(tokens);
    out.cached.push_back(cached);
    conv.push_back({"assistant", text});
  }
  return out;
}

// The engine on the GPU: later turns reuse the cache, and greedy answers equal those
// with the cache off. (The tokens of an earlier answer are computed by decode steps with
// the cache on and by the prefill kernel with it off: equal within bf16 rounding, so
// greedy choices agree; sampled draws can fall the other side of a boundary.)
TEST_F(CudaEngineTest, GreedyTurnsWithTheCacheEqualTurnsWithout) {
  for (const char* salt : {"", "(a)", "(bb)"}) {
    const Conversation on = RunConversation(true, 0.0f, salt), off = RunConversation(false, 0.0f, salt);
    EXPECT_EQ(on.answers, off.answers) << "greedy answers differ with the session cache on, salt '" << salt << "'";
    ASSERT_EQ(on.cached.size(), 3u);
    EXPECT_EQ(on.cached[0], 0);
    EXPECT_GT(on.cached[1], 0) << "turn 2 reused nothing";
    EXPECT_GT(on.cached[2], on.cached[1]) << "turn 3 reused less than turn 2";
    EXPECT_EQ(off.cached, (std::vector<int64_t>{0, 0, 0}));
  }
}

// Sampling on the device is reproducible: the same seed gives the same answers, through
// the cache, its loads and graph-launched decode steps.
TEST_F(CudaEngineTest, SampledTurnsAreReproducible) {
  const Conversation a = RunConversation(true, 0.8f, ""), b = RunConversation(true, 0.8f, "");
  EXPECT_EQ(a.answers, b.answers);
  EXPECT_NE(a.answers, RunConversation(true, 0.0f, "").answers) << "temperature 0.8 drew exactly the greedy tokens";
}

enum class CacheMode { kOff, kHost, kHbm, kHostSlowed };

// 64 sessions of two turns each, every turn of a round submitted at once: the greedy
// answers and each turn's cached tokens and tier.
struct ManyOutput {
  std::vector<std::vector<int32_t>> answers;
  std::vector<int64_t> cached;
  std::vector<storage::Tier> tiers;
};

// `sessions` sessions; skinny: the decode steps' products on the skinny kernel (the test
// model's matrices are below its default size).
ManyOutput RunManySessions(CacheMode mode, int sessions = 64, bool skinny = false) {
  ByteTokenizer tokenizer;
  ManyOutput out;
  CudaModelOptions o;
  if (skinny) o.skinny_min_weight_bytes = 0;
  o.kv_pool_bytes = 256 << 20;
  o.initial_step_tokens = 256;
  o.kv_read_group_tokens = 256;  // several groups per layer through the read buffer
  auto made = CudaModel::Create(ModelWeights::Random(ModelConfig::Builtin(), 77, tokenizer.SilentTokens()), o);
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return out;
  CudaModel* model = made->get();
  std::unique_ptr<storage::SessionStore> store;
  EngineOptions eo;
  if (mode != CacheMode::kOff) {
    storage::SessionStoreOptions so;
    so.layout = model::ChunkLayoutFor(*model, 16);
    so.host_capacity_bytes = 512 << 20;
    so.model_fingerprint = model->fingerprint();
    store = *storage::SessionStore::Create(so);
    if (mode != CacheMode::kHbm) eo.hbm.capacity_bytes = 0;  // every return loads from the host tier
  }
  auto engine = Engine::Create(eo, *std::move(made), &tokenizer, store.get(), nullptr);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return out;
  // Slowed streams: 2 ms delays put on the copy, place and write streams over and over
  // while the turns run, so transfers land late and in ever different places.
  std::atomic<bool> stop{false};
  std::thread slower;
  if (mode == CacheMode::kHostSlowed) {
    slower = std::thread([&] {
      cudaSetDevice(0);
      while (!stop.load()) {
        for (CUstream_st* s : {model->LoadCopyStreamForTesting(), model->LoadPlaceStreamForTesting(),
                               model->WriteStreamForTesting()}) {
          kernels::testing::LaunchDelay(s, 2000);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
      }
    });
  }
  std::vector<std::vector<ChatMessage>> convs(sessions);
  for (int round = 0; round < 2; ++round) {
    std::vector<std::shared_ptr<TurnStream>> streams;
    for (int i = 0; i < sessions; ++i) {
      // Histories of different lengths: 1 to ~10 chunks of 16 tokens.
      convs[i].push_back({"user", absl::StrCat("Session ", i, ": ", std::string(static_cast<size_t>(i * 2), 'x'),
                                               round == 0 ? " hello, tell me about caches." : " and then?")});
      TurnRequest r;
      r.key = {"t", absl::StrCat("s", i)};
      r.prompt = *tokenizer.RenderChat(convs[i]);
      r.max_new_tokens = 12;
      auto stream = (*engine)->Submit(std::move(r));
      EXPECT_TRUE(stream.ok()) << stream.status();
      if (!stream.ok()) return out;
      streams.push_back(*stream);
    }
    for (int i = 0; i < sessions; ++i) {
      testing::TurnOutput t = testing::Collect(streams[i]);
      EXPECT_TRUE(t.status.ok()) << t.status;
      out.answers.push_back(t.tokens);
      out.cached.push_back(t.result.usage.cached_tokens);
      out.tiers.push_back(t.result.cache_tier);
      convs[i].push_back({"assistant", t.text});
    }
  }
  stop = true;
  if (slower.joinable()) slower.join();
  return out;
}

// 64 sessions return at once: their histories come from the host tier, loaded layer by
// layer beside the steps that read them (also with the copy, place and write streams
// slowed on purpose), or stay resident in HBM. Every cache mode gives the same greedy
// answers, token for token (the KV they read is the same bits however it got there), and
// first turns equal those with the cache off. Second turns with the cache off recompute
// the first answer's KV by prefill where the cache kept what decode steps computed: equal
// within bf16 rounding, so a near-tie can go the other way in a few sessions, never in
// many (a missing fence garbles most of them).
TEST_F(CudaEngineTest, ManyConcurrentSessionsWithTheCacheEqualWithout) {
  const ManyOutput off = RunManySessions(CacheMode::kOff);
  ASSERT_EQ(off.answers.size(), 128u);
  std::vector<std::vector<int32_t>> first_cached;
  for (CacheMode mode : {CacheMode::kHost, CacheMode::kHbm, CacheMode::kHostSlowed}) {
    const ManyOutput on = RunManySessions(mode);
    const char* name = mode == CacheMode::kHost ? "host" : mode == CacheMode::kHbm ? "hbm" : "host, slowed";
    ASSERT_EQ(on.answers.size(), off.answers.size()) << name;
    std::string differ;
    for (size_t i = 0; i < 64; ++i) {
      EXPECT_EQ(on.answers[i], off.answers[i]) << name << ": first turn of session " << i;
    }
    int second_differ = 0;
    for (size_t i = 64; i < on.answers.size(); ++i) {
      if (on.answers[i] != off.answers[i]) {
        ++second_differ;
        absl::StrAppend(&differ, " ", i - 64);
      }
      EXPECT_GT(on.cached[i], 0) << name << ": session " << i - 64 << " reused nothing";
      EXPECT_EQ(on.tiers[i], mode == CacheMode::kHbm ? storage::Tier::kHbm : storage::Tier::kHost) << name;
    }
    EXPECT_LE(second_differ, 6) << name << ": second turns differing from the cache-off run:" << differ;
    if (second_differ > 0) std::printf("%s: second turns near-tied off the cache-off run:%s\n", name, differ.c_str());
    if (first_cached.empty()) {
      first_cached = on.answers;
    } else {
      EXPECT_EQ(on.answers, first_cached) << name << ": answers differ from the host-tier run's";
    }
  }
}

// Decode steps of at most 16 sequences on the skinny kernel: first turns equal with the
// cache on and off (the same steps), and second turns, whose steps are batched otherwise
// with the cache (their prompts are shorter), part at a near-tie in a few sessions at
// most (a wrong product garbles them all).
TEST_F(CudaEngineTest, SkinnyDecodeStepsWithTheCacheEqualWithout) {
  const ManyOutput off = RunManySessions(CacheMode::kOff, 12, true);
  const ManyOutput on = RunManySessions(CacheMode::kHost, 12, true);
  ASSERT_EQ(off.answers.size(), 24u);
  ASSERT_EQ(on.answers.size(), 24u);
  int differ = 0;
  for (size_t i = 0; i < 24; ++i) {
    if (i < 12) EXPECT_EQ(on.answers[i], off.answers[i]) << "first turn of session " << i;
    if (i >= 12) {
      differ += on.answers[i] != off.answers[i];
      EXPECT_GT(on.cached[i], 0) << "session " << i - 12 << " reused nothing";
    }
  }
  EXPECT_LE(differ, 2) << "second turns differing from the cache-off run";
}

// 16 sessions over two shared system prompts on the GPU (the prompts' whole pages shared
// in the sessions' page lists): each prompt is computed once, returning turns reuse their
// history, and with the shared pages read by each session the greedy answers equal the
// cache-off engine's with the prompts inline. Read by relay attention (each prompt's
// sessions decode as a group), the system part's bf16 operands (kernels/attention/relay.h)
// can tip a near-tie in a few sessions, never in many (a wrong page or a missing fence
// garbles most of them); the first answer token, before any relay step, always agrees.
TEST_F(CudaEngineTest, SharedSystemPromptsAnswerAsInline) {
  ByteTokenizer tokenizer;
  auto run = [&](bool share, bool relay, metrics::Registry* registry, int64_t beside_min_tokens = -1) {
    CudaModelOptions o;
    o.kv_pool_bytes = 64 << 20;
    o.initial_step_tokens = 256;
    o.share_prefixes = share;
    o.relay_attention = relay;
    o.relay_min_saved_tokens = 0;  // the test's short prompts: relay every group
    o.relay_beside_min_tokens = beside_min_tokens;
    auto model = CudaModel::Create(ModelWeights::Random(ModelConfig::Builtin(), 77, tokenizer.SilentTokens()), o);
    EXPECT_TRUE(model.ok()) << model.status();
    std::unique_ptr<storage::SessionStore> store;
    if (share) {
      storage::SessionStoreOptions so;
      so.layout = model::ChunkLayoutFor(**model, 16);
      so.host_capacity_bytes = 64 << 20;
      so.model_fingerprint = (*model)->fingerprint();
      store = *storage::SessionStore::Create(so);
    }
    EngineOptions eo;
    eo.min_shared_prompt_tokens = 64;
    auto engine = *Engine::Create(eo, *std::move(model), &tokenizer, store.get(), registry);
    std::vector<std::vector<int32_t>> answers;
    std::vector<int64_t> own_tokens(16);  // what each session's last turn stores: its own tokens
    for (int turn = 0; turn < 2; ++turn) {
      std::vector<std::shared_ptr<TurnStream>> streams;
      for (int s = 0; s < 16; ++s) {
        std::string system = absl::StrCat("You are assistant ", s % 2, ". ");
        while (system.size() < 150) absl::StrAppend(&system, "Keep answers short and kind. ");
        std::vector<ChatMessage> conv = {{"system", system}, {"user", absl::StrCat("Question ", s)}};
        if (turn == 1) {
          std::string answer;
          for (int32_t t : answers[static_cast<size_t>(s)]) answer += tokenizer.TokenBytes(t);
          conv.push_back({"assistant", answer});
          conv.push_back({"user", "And then?"});
        }
        TurnRequest r;
        r.key = {"t", absl::StrCat("s", s)};
        r.prompt = *tokenizer.RenderChat(conv);
        auto part = *tokenizer.RenderChat({{"system", system}, {"user", "a"}});
        auto other = *tokenizer.RenderChat({{"system", system}, {"user", "b"}});
        while (r.system_tokens < static_cast<int64_t>(part.size()) && part[r.system_tokens] == other[r.system_tokens]) {
          ++r.system_tokens;
        }
        r.max_new_tokens = 12;
        own_tokens[static_cast<size_t>(s)] = static_cast<int64_t>(r.prompt.size()) - r.system_tokens;
        streams.push_back(*engine->Submit(std::move(r)));
      }
      for (size_t s = 0; s < streams.size(); ++s) {
        testing::TurnOutput out = testing::Collect(streams[s]);
        EXPECT_TRUE(out.status.ok()) << out.status;
        if (turn == 0) answers.push_back(out.tokens);
        if (turn == 1 && share) EXPECT_GT(out.result.usage.cached_tokens, 150);
        own_tokens[s] += static_cast<int64_t>(out.tokens.size()) - 1;  // every answer token but the last
      }
    }
    if (share) {
      // Each session stores only its own tokens, from the prompt's end on (the prompts are
      // not whole pages: their last rows are copied into each session's first page).
      EXPECT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
      EXPECT_TRUE(store->AwaitWriteBacks(absl::Seconds(30)).ok());
      for (int s = 0; s < 16; ++s) {
        auto info = store->Get({"t", absl::StrCat("s", s)});
        EXPECT_TRUE(info.ok()) << info.status();
        if (info.ok()) EXPECT_EQ(info->cached_tokens, own_tokens[static_cast<size_t>(s)]) << "session " << s;
      }
    }
    return answers;
  };
  metrics::Registry registry, relay_registry;
  const auto inline_answers = run(false, false, nullptr);
  EXPECT_EQ(run(true, false, &registry), inline_answers) << "greedy answers differ with shared prompts' pages";
  EXPECT_EQ(registry.AddCounter("strata_system_prompt_loads_total", "").WithLabels({{"source", "computed"}}).Value(),
            2);
  // Relay's answers against the inline ones: every first token equal, a near-tie tipped in
  // a few sessions at most.
  auto expect_near_inline = [&](const std::vector<std::vector<int32_t>>& got, const std::string& form) {
    ASSERT_EQ(got.size(), inline_answers.size()) << form;
    std::string differ;
    int differing = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(got[i].empty()) << form;
      EXPECT_EQ(got[i][0], inline_answers[i][0]) << form << ", session " << i << ": first token (no relay step yet)";
      if (got[i] != inline_answers[i]) {
        ++differing;
        absl::StrAppend(&differ, " ", i);
      }
    }
    EXPECT_LE(differing, 4) << form << ": answers differ from the inline prompts' in sessions" << differ;
    if (differing > 0) std::printf("%s: sessions near-tied off the inline answers:%s\n", form.c_str(), differ.c_str());
  };
  expect_near_inline(run(true, true, &relay_registry), "relay");
  EXPECT_EQ(
      relay_registry.AddCounter("strata_system_prompt_loads_total", "").WithLabels({{"source", "computed"}}).Value(), 2);
  // The same with every relay step's system part on the model's side stream beside the
  // decode (relay_beside_min_tokens 0): the same bound.
  metrics::Registry beside_registry;
  expect_near_inline(run(true, true, &beside_registry, 0), "relay beside");
}

// Batch turns on the GPU: a group's prefix is computed once (no session cache at all) and
// its turns run on its shared pages with relay attention; their answers match each
// prompt computed alone up to bf16 near-ties, and the prefix is freed when released.
TEST_F(CudaEngineTest, BatchTurnsShareTheirGroupPrefix) {
  ByteTokenizer tokenizer;
  std::string document = "Document: ";
  while (document.size() < 300) absl::StrAppend(&document, "The mill by the river ground corn for the valley. ");
  std::vector<std::vector<int32_t>> prompts;
  for (int q = 0; q < 16; ++q) {
    prompts.push_back(*tokenizer.RenderChat({{"system", document}, {"user", absl::StrCat("Question ", q, "?")}}));
  }
  const int64_t prefix = static_cast<int64_t>(document.size());  // inside the system part
  auto run = [&](bool batch, metrics::Registry* registry, std::vector<int64_t>* cached) {
    CudaModelOptions o;
    o.kv_pool_bytes = 64 << 20;
    o.initial_step_tokens = 256;
    o.share_prefixes = batch;
    o.relay_attention = batch;
    o.relay_min_saved_tokens = 0;
    auto model = CudaModel::Create(ModelWeights::Random(ModelConfig::Builtin(), 77, tokenizer.SilentTokens()), o);
    EXPECT_TRUE(model.ok()) << model.status();
    auto engine = *Engine::Create({}, *std::move(model), &tokenizer, nullptr, registry);
    std::vector<std::shared_ptr<TurnStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      TurnRequest r;
      r.key = {"t", absl::StrCat("\x01" "batch/", i)};
      r.prompt = prompts[i];
      r.system_tokens = batch ? prefix : 0;
      r.batch = batch;
      r.max_new_tokens = 12;
      streams.push_back(*engine->Submit(std::move(r)));
    }
    std::vector<std::vector<int32_t>> answers;
    for (auto& stream : streams) {
      testing::TurnOutput out = testing::Collect(stream);
      EXPECT_TRUE(out.status.ok()) << out.status;
      answers.push_back(out.tokens);
      if (cached != nullptr) cached->push_back(out.result.usage.cached_tokens);
    }
    if (batch) {
      EXPECT_TRUE(engine->AwaitIdle(absl::Seconds(30)));
      EXPECT_EQ(engine->ListSystemPrompts("t").size(), 1u);
      EXPECT_TRUE(engine->ReleaseBatchPrefix("t", absl::MakeConstSpan(prompts[0]).subspan(0, prefix)));
      EXPECT_TRUE(engine->ListSystemPrompts("t").empty());
    }
    return answers;
  };
  const auto alone = run(false, nullptr, nullptr);
  metrics::Registry registry;
  std::vector<int64_t> cached;
  const auto batched = run(true, &registry, &cached);
  ASSERT_EQ(batched.size(), alone.size());
  int differing = 0;
  for (size_t i = 0; i < alone.size(); ++i) {
    ASSERT_FALSE(batched[i].empty());
    EXPECT_EQ(batched[i][0], alone[i][0]) << "prompt " << i << ": first token";
    differing += batched[i] != alone[i];
    EXPECT_GT(cached[i], 0) << "prompt " << i << " read no shared pages";
    EXPECT_LE(cached[i], prefix);
  }
  EXPECT_LE(differing, 4) << "batch answers off the prompts alone (bf16 near-ties)";
  EXPECT_EQ(registry.AddCounter("strata_system_prompt_loads_total", "").WithLabels({{"source", "computed"}}).Value(),
            1);
}

}  // namespace
}  // namespace strata::engine
