// A conversation cut to fit the context window reuses its kept tokens' stored KV at their
// new positions (AttentionStore §3.4): the turn that cuts computes only its new tokens,
// the turns after it extend the kept conversation, and the session's record becomes the
// kept conversation. Without that reuse, a cut turn recomputes the kept tokens and answers
// exactly as with the cache off.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/context_window.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"

namespace strata::engine {
namespace {

using testing::Collect;
using testing::SmallConfig;
using testing::TurnOutput;

constexpr int kWindow = 256;
constexpr int kMaxNew = 8;

struct Turn {
  TurnOutput out;
  int64_t dropped = 0;  // of the sent conversation
  int64_t kept = 0;     // its first tokens, before the cut
  int64_t question_tokens = 0;
};

class ContextCutTest : public ::testing::Test {
 protected:
  // `cache`: a host tier (and an HBM tier of `hbm_bytes`); `reuse`: kept KV reused across
  // a cut.
  std::unique_ptr<Engine> Make(bool cache, bool reuse = true, int64_t hbm_bytes = -1) {
    model::ModelConfig c = SmallConfig();
    auto model = std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens()));
    std::unique_ptr<storage::SessionStore> store;
    if (cache) store = testing::HostOnlyStore(c, model->weights().fingerprint());
    EngineOptions o;
    o.max_context = kWindow;
    o.warmup_tokens = 0;
    o.context_window.reuse_kept_kv = reuse;
    o.hbm.capacity_bytes = hbm_bytes;
    auto e = Engine::Create(o, std::move(model), &tokenizer_, store.get(), nullptr);
    EXPECT_TRUE(e.ok()) << e.status();
    stores_.push_back(std::move(store));
    return e.ok() ? *std::move(e) : nullptr;
  }

  // One turn as the server sends it: the whole conversation, cut to fit the window.
  Turn Send(Engine& engine, const std::string& session, const std::vector<text::ChatMessage>& messages) {
    Turn t;
    auto rendered = tokenizer_.RenderChat(messages);
    EXPECT_TRUE(rendered.ok());
    auto cut = TruncateMessages(tokenizer_, messages, 1, *rendered, kMaxNew, engine.context_tokens(),
                                engine.context_window().ratio);
    EXPECT_TRUE(cut.ok()) << cut.status();
    TurnRequest r;
    r.key = {"t", session};
    r.prompt = cut->prompt;
    r.max_new_tokens = kMaxNew;
    r.truncated_tokens = cut->dropped_tokens;
    r.kept_prefix_tokens = cut->kept_prefix_tokens;
    t.dropped = cut->dropped_tokens;
    t.kept = cut->kept_prefix_tokens;
    t.question_tokens = static_cast<int64_t>(messages.back().content.size()) + 2;
    auto stream = engine.Submit(std::move(r));
    EXPECT_TRUE(stream.ok()) << stream.status();
    t.out = Collect(*stream);
    EXPECT_TRUE(t.out.status.ok()) << t.out.status;
    EXPECT_TRUE(engine.AwaitIdle(absl::Seconds(30)));  // the write-back is done: the next turn sees it
    return t;
  }

  // `turns` turns of one conversation, each appending the answer and a new question.
  std::vector<Turn> Converse(Engine& engine, const std::string& session, int turns) {
    std::vector<text::ChatMessage> messages = {{"system", "Be brief."}};
    std::vector<Turn> out;
    for (int i = 0; i < turns; ++i) {
      messages.push_back({"user", absl::StrCat("question ", i, ": tell me about ", i * 7, " caches")});
      out.push_back(Send(engine, session, messages));
      messages.push_back({"assistant", out.back().out.text});
    }
    return out;
  }

  text::ByteTokenizer tokenizer_;
  std::vector<std::unique_ptr<storage::SessionStore>> stores_;  // outlive their engines
};

TEST_F(ContextCutTest, ACutTurnComputesOnlyItsNewTokensAndLaterTurnsReuseAllItKept) {
  for (const int64_t hbm_bytes : {int64_t{-1}, int64_t{0}}) {  // the HBM tier on, and off (host copy only)
    SCOPED_TRACE(hbm_bytes == 0 ? "no HBM tier" : "HBM tier");
    auto engine = Make(/*cache=*/true, /*reuse=*/true, hbm_bytes);
    const std::vector<Turn> turns = Converse(*engine, "s", 16);
    int cuts = 0;
    for (size_t i = 1; i < turns.size(); ++i) {
      const TurnUsage& prev = turns[i - 1].out.result.usage;
      const TurnUsage& now = turns[i].out.result.usage;
      // Everything the previous turn stored, less what the cut dropped of it.
      const int64_t gap = turns[i].dropped - turns[i - 1].dropped;
      if (gap > 0) ++cuts;
      EXPECT_EQ(now.cached_tokens, prev.prompt_tokens + prev.completion_tokens - 1 - gap) << "turn " << i;
      EXPECT_EQ(now.computed_tokens, now.prompt_tokens - now.cached_tokens);
      // The new question, the assistant header, the previous answer's end-of-turn token
      // and, when that answer stopped at max_new_tokens, its last token (never fed back).
      const bool length = turns[i - 1].out.result.finish == FinishReason::kLength;
      EXPECT_EQ(now.computed_tokens, turns[i].question_tokens + 2 + (length ? 1 : 0))
          << "turn " << i << " computes its new question, not the kept history";
      EXPECT_EQ(turns[i].out.result.truncated_tokens, turns[i].dropped);
    }
    EXPECT_GE(cuts, 2) << "16 turns of ~45 tokens on a 256-token window are cut several times";
  }
}

// The KV of a kept token is the stored one, whichever tier it came from: the answers are
// the same with the session's resident copy (the tokens before the cut stay in place,
// the rest loaded from the host tier) as with the host copy alone.
TEST_F(ContextCutTest, TheAnswersAcrossCutsAreTheSameFromTheResidentCopyAndFromTheHostCopy) {
  auto with_hbm = Make(true, true, -1);
  auto host_only = Make(true, true, 0);
  const std::vector<Turn> a = Converse(*with_hbm, "s", 12);
  const std::vector<Turn> b = Converse(*host_only, "s", 12);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].out.tokens, b[i].out.tokens) << "turn " << i;
    EXPECT_EQ(a[i].dropped, b[i].dropped);
  }
}

// Without reuse across a cut (token truncation with a recompute, as the cache off does),
// a cut turn reuses only the tokens before the cut, and every answer equals the cache-off
// server's token for token.
TEST_F(ContextCutTest, WithoutReuseACutTurnRecomputesTheKeptTokensAndAnswersAsWithTheCacheOff) {
  auto on = Make(true, /*reuse=*/false);
  auto off = Make(false);
  const std::vector<Turn> a = Converse(*on, "s", 12);
  const std::vector<Turn> b = Converse(*off, "s", 12);
  int cuts = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].out.tokens, b[i].out.tokens) << "turn " << i;
    if (i > 0 && a[i].dropped > a[i - 1].dropped) {
      ++cuts;
      EXPECT_EQ(a[i].out.result.usage.cached_tokens, a[i].kept) << "turn " << i << ": only the tokens before the cut";
      EXPECT_LT(a[i].kept, 30);
    }
  }
  EXPECT_GE(cuts, 2);
}

}  // namespace
}  // namespace strata::engine
