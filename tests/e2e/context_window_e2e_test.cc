// Conversations longer than the context window, against a real `strata serve` with a
// small window (--max_context): the policy (truncate or reject), what the final event and
// GetSession say, the metrics, and bad input.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::GetSessionInfo;
using testing::RunChat;
using testing::ServerProcess;

constexpr int kWindow = 512;

// With the byte tokenizer a message is its bytes plus two tokens: an exchange here is 106
// tokens, the system message 32.
v1::ChatRequest Conversation(const std::string& session, int exchanges, int bytes_each = 40, int max_new = 16) {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(max_new);
  auto* system = r.add_messages();
  system->set_role("system");
  system->set_content("You answer in short sentences.");
  for (int i = 0; i < exchanges; ++i) {
    auto* user = r.add_messages();
    user->set_role("user");
    user->set_content(absl::StrCat("question ", i, ": ", std::string(static_cast<size_t>(bytes_each), 'q')));
    auto* answer = r.add_messages();
    answer->set_role("assistant");
    answer->set_content(absl::StrCat("answer ", i, ": ", std::string(static_cast<size_t>(bytes_each), 'a')));
  }
  auto* last = r.add_messages();
  last->set_role("user");
  last->set_content("What did I ask first?");
  return r;
}

std::map<std::string, double> Scrape(int port) {
  auto body = metrics::HttpGet("127.0.0.1", port, "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  auto samples = metrics::ParsePrometheusText(body.ok() ? *body : "");
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::map<std::string, double>{};
}

class ContextWindowE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::vector<std::string> common = {"--model=random:builtin", "--max_context=" + std::to_string(kWindow),
                                             "--pin_host_memory=false", "--host_cache_bytes=67108864"};
    std::vector<std::string> on = common, off = common;
    off.push_back("--cache=off");
    auto a = ServerProcess::Start(on);
    ASSERT_TRUE(a.ok()) << a.status();
    cache_on_ = a->release();
    auto b = ServerProcess::Start(off);
    ASSERT_TRUE(b.ok()) << b.status();
    cache_off_ = b->release();
  }
  static void TearDownTestSuite() {
    delete cache_on_;
    delete cache_off_;
    cache_on_ = cache_off_ = nullptr;
  }
  static ServerProcess* cache_on_;
  static ServerProcess* cache_off_;
};
ServerProcess* ContextWindowE2eTest::cache_on_ = nullptr;
ServerProcess* ContextWindowE2eTest::cache_off_ = nullptr;

TEST_F(ContextWindowE2eTest, AConversationPastTheWindowKeepsItsSystemPartAndDropsTheOldest) {
  const auto before = Scrape(cache_on_->metrics_port());
  v1::ChatRequest request = Conversation("long", 8);  // ~8 x 104 tokens: past 512
  auto turn = RunChat(cache_on_->target(), request);
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  const v1::ChatDone& done = turn.done;
  EXPECT_GT(done.truncated_tokens(), 0u);
  EXPECT_LE(done.usage().prompt_tokens() + request.max_new_tokens(), static_cast<uint32_t>(kWindow));
  // At least a step of half the window goes (whole exchanges of 106 tokens: 5 of 8, so
  // that 512 go), so the next turns have room before the next cut.
  EXPECT_EQ(done.truncated_tokens(), 5u * 106u);

  // The session holds the kept conversation (and the answer), not the sent one.
  auto info = GetSessionInfo(cache_on_->target(), "long");
  for (int i = 0; i < 100 && info.ok() && info->cached_tokens() == 0; ++i) {
    info = GetSessionInfo(cache_on_->target(), "long");
  }
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->cached_tokens(), done.usage().prompt_tokens() + done.usage().completion_tokens() - 1);

  const auto after = Scrape(cache_on_->metrics_port());
  auto delta = [&](const std::string& key) {
    auto a = after.find(key);
    EXPECT_NE(a, after.end()) << key << " missing from /metrics";
    auto b = before.find(key);
    return (a == after.end() ? 0 : a->second) - (b == before.end() ? 0 : b->second);
  };
  EXPECT_EQ(delta("strata_context_truncations_total"), 1);
  EXPECT_EQ(delta("strata_context_truncated_tokens_total"), done.truncated_tokens());
}

// The cut depends on the request alone: the cache-off server cuts the same way and
// answers alike, and sending the kept conversation itself gives that answer too.
TEST_F(ContextWindowE2eTest, TheCutConversationAnswersAsWithTheCacheOffAndAsTheKeptOneSentWhole) {
  v1::ChatRequest request = Conversation("same", 7);
  auto on = RunChat(cache_on_->target(), request);
  auto off = RunChat(cache_off_->target(), request);
  ASSERT_TRUE(on.status.ok()) << on.status.error_message();
  ASSERT_TRUE(off.status.ok()) << off.status.error_message();
  EXPECT_GT(on.done.truncated_tokens(), 0u);
  EXPECT_EQ(on.done.truncated_tokens(), off.done.truncated_tokens());
  EXPECT_EQ(on.done.usage().prompt_tokens(), off.done.usage().prompt_tokens());
  EXPECT_EQ(on.tokens, off.tokens);

  // The kept conversation: the system message and the newest exchanges, sent as is.
  const int dropped_bytes_per_exchange = (12 + 40 + 2) + (10 + 40 + 2);  // "question i: ", "answer i: "
  const int dropped_exchanges = static_cast<int>(on.done.truncated_tokens()) / dropped_bytes_per_exchange;
  ASSERT_EQ(static_cast<int>(on.done.truncated_tokens()) % dropped_bytes_per_exchange, 0);
  v1::ChatRequest kept = request;
  kept.set_session_id("same-kept");
  kept.mutable_messages()->DeleteSubrange(1, 2 * dropped_exchanges);
  auto whole = RunChat(cache_off_->target(), kept);
  ASSERT_TRUE(whole.status.ok()) << whole.status.error_message();
  EXPECT_EQ(whole.done.truncated_tokens(), 0u);
  EXPECT_EQ(whole.done.usage().prompt_tokens(), on.done.usage().prompt_tokens());
  EXPECT_EQ(whole.tokens, on.tokens);
}

// After a cut, the next turns extend the kept conversation: the session's stored copy is
// reused whole until the conversation outgrows the window again.
TEST_F(ContextWindowE2eTest, TheTurnAfterACutExtendsTheKeptConversationAndReusesIt) {
  v1::ChatRequest request = Conversation("next", 7);
  auto first = RunChat(cache_on_->target(), request);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_GT(first.done.truncated_tokens(), 0u);
  // The client sends the whole conversation again, with the answer and a short question.
  auto* answer = request.add_messages();
  answer->set_role("assistant");
  answer->set_content(first.text);
  auto* user = request.add_messages();
  user->set_role("user");
  user->set_content("Go on.");
  auto second = RunChat(cache_on_->target(), request);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.done.truncated_tokens(), first.done.truncated_tokens()) << "the same cut";
  EXPECT_EQ(second.done.usage().cached_tokens(),
            first.done.usage().prompt_tokens() + first.done.usage().completion_tokens() - 1)
      << "everything the first turn stored is reused";
}

TEST_F(ContextWindowE2eTest, RejectKeepsTodaysAnswer) {
  v1::ChatRequest request = Conversation("reject", 8);
  request.set_context_overflow(v1::CONTEXT_OVERFLOW_REJECT);
  auto turn = RunChat(cache_on_->target(), request);
  EXPECT_EQ(turn.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(turn.status.error_message().find("tokens; the model's context holds 512"), std::string::npos)
      << turn.status.error_message();
  EXPECT_FALSE(GetSessionInfo(cache_on_->target(), "reject").ok()) << "a refused turn changes nothing";
}

TEST_F(ContextWindowE2eTest, ASystemPartOrLastMessageLongerThanTheWindowIsRefusedSayingWhich) {
  v1::ChatRequest system = Conversation("big-system", 2);
  system.mutable_messages(0)->set_content(std::string(600, 's'));
  auto a = RunChat(cache_on_->target(), system);
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(a.status.error_message().find("the system part is"), std::string::npos) << a.status.error_message();

  v1::ChatRequest last = Conversation("big-last", 2);
  last.mutable_messages(last.messages_size() - 1)->set_content(std::string(600, 'u'));
  auto b = RunChat(cache_on_->target(), last);
  EXPECT_EQ(b.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(b.status.error_message().find("the last message"), std::string::npos) << b.status.error_message();
}

TEST_F(ContextWindowE2eTest, TokenIdsAreCutOnlyAfterAPrefixTheClientNames) {
  v1::ChatRequest r;
  r.set_session_id("tokens");
  r.set_max_new_tokens(8);
  for (int i = 0; i < 600; ++i) r.add_token_ids(3 + i % 200);
  auto refused = RunChat(cache_on_->target(), r);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "no keep prefix: refused";
  EXPECT_NE(refused.status.error_message().find("the model's context holds 512"), std::string::npos);

  r.set_context_overflow(v1::CONTEXT_OVERFLOW_TRUNCATE);
  auto named = RunChat(cache_on_->target(), r);
  EXPECT_EQ(named.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(named.status.error_message().find("keep_prefix_tokens"), std::string::npos);

  r.set_keep_prefix_tokens(20);
  auto cut = RunChat(cache_on_->target(), r);
  ASSERT_TRUE(cut.status.ok()) << cut.status.error_message();
  // 600 + 8 is 96 over 512: one step of 256 goes.
  EXPECT_EQ(cut.done.truncated_tokens(), 256u);
  EXPECT_EQ(cut.done.usage().prompt_tokens(), 600u - 256u);

  r.set_keep_prefix_tokens(600);
  auto outside = RunChat(cache_on_->target(), r);
  EXPECT_EQ(outside.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::ChatRequest messages = Conversation("keep-on-messages", 1);
  messages.set_keep_prefix_tokens(3);
  auto wrong = RunChat(cache_on_->target(), messages);
  EXPECT_EQ(wrong.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(wrong.status.error_message().find("keep_prefix_tokens is for token_ids"), std::string::npos);
}

// A 30-turn conversation on a 512-token window, with an SSD tier: it keeps getting
// answers, is cut several times, each turn (cut or not) reuses everything the session
// stored that the cut kept (its KV placed at the new positions), and a restart halfway
// changes nothing of that.
TEST(ContextWindowLongE2eTest, ThirtyTurnsAreCutSeveralTimesReuseAcrossEachCutAndSurviveARestart) {
  storage::testing::TempDir tmp("strata-cut-e2e");
  std::filesystem::create_directories(tmp.path() + "/ssd");
  // STRATA_E2E_DEVICE=cuda runs it on the GPU (tests/gpu/device_session.sh does): the kept
  // runs then come from inside chunks through the CUDA loader.
  const char* device = std::getenv("STRATA_E2E_DEVICE");
  const std::vector<std::string> flags = {"--model=random:builtin",
                                          std::string("--device=") + (device != nullptr ? device : "cpu"),
                                          "--max_context=" + std::to_string(kWindow),
                                          "--pin_host_memory=false",
                                          "--host_cache_bytes=67108864",
                                          "--ssd_dirs=" + tmp.path() + "/ssd",
                                          "--ssd_capacity_bytes=67108864",
                                          "--index_dir=" + tmp.path() + "/index",
                                          "--ssd_probe_bytes=0",
                                          "--fetch_or_recompute=false"};
  auto started = ServerProcess::Start(flags);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ServerProcess> server = *std::move(started);

  v1::ChatRequest request;
  request.set_session_id("thirty");
  request.set_max_new_tokens(16);
  auto* system = request.add_messages();
  system->set_role("system");
  system->set_content("You answer in short sentences.");
  uint32_t prev_prompt = 0, prev_completion = 0, prev_dropped = 0;
  int cuts = 0;
  for (int i = 0; i < 30; ++i) {
    if (i == 15) {
      EXPECT_EQ(server->Stop(), 0);
      auto again = ServerProcess::Start(flags);
      ASSERT_TRUE(again.ok()) << again.status();
      server = *std::move(again);
    }
    auto* user = request.add_messages();
    user->set_role("user");
    user->set_content(absl::StrCat("question ", i, ": what do you know about ", i * 13, " caches?"));
    request.set_persist(i == 14);  // durable before the restart
    auto turn = RunChat(server->target(), request);
    ASSERT_TRUE(turn.status.ok()) << "turn " << i << ": " << turn.status.error_message();
    const v1::ChatDone& done = turn.done;
    ASSERT_GE(done.usage().completion_tokens(), 1u) << "turn " << i;
    EXPECT_LE(done.usage().prompt_tokens() + request.max_new_tokens(), static_cast<uint32_t>(kWindow));
    if (i == 14) EXPECT_TRUE(done.persisted());
    EXPECT_GE(done.truncated_tokens(), prev_dropped) << "turn " << i << ": a cut never comes back";
    if (i > 0) {
      const uint32_t gap = done.truncated_tokens() - prev_dropped;
      if (gap > 0) ++cuts;
      EXPECT_EQ(done.usage().cached_tokens(), prev_prompt + prev_completion - 1 - gap)
          << "turn " << i << (gap > 0 ? " (cut)" : "") << (i == 15 ? " (after the restart)" : "")
          << ": everything stored that the cut kept is reused";
    }
    if (i == 15) EXPECT_EQ(done.cache_tier(), v1::TIER_SSD) << "the session came back from SSD";
    prev_prompt = done.usage().prompt_tokens();
    prev_completion = done.usage().completion_tokens();
    prev_dropped = done.truncated_tokens();
    auto* answer = request.add_messages();
    answer->set_role("assistant");
    answer->set_content(turn.text);
  }
  EXPECT_GE(cuts, 3) << "30 turns of ~70 tokens on a 512-token window";
  // The session holds the last cut conversation and its answer.
  auto info = GetSessionInfo(server->target(), "thirty");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->cached_tokens(), prev_prompt + prev_completion - 1);
  EXPECT_EQ(server->Stop(), 0);
}

}  // namespace
}  // namespace strata
