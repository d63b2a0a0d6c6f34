#include "engine/context_window.h"

#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "text/tokenizer.h"

namespace strata::engine {
namespace {

TEST(ContextWindowTest, DropsNothingWhenItFitsElseAMultipleOfTheRatioOfTheWindow) {
  EXPECT_EQ(TokensToDrop(50, 14, 64, 0.5), 0) << "50 + 14 fits 64";
  EXPECT_EQ(TokensToDrop(51, 14, 64, 0.5), 32) << "one token over: a whole step (half the window) goes";
  EXPECT_EQ(TokensToDrop(83, 14, 64, 0.5), 64) << "33 over: two steps";
  EXPECT_EQ(TokensToDrop(60, 1000, 64, 0.5), 32) << "the answer's room is at most ratio x window";
  EXPECT_EQ(TokensToDrop(64, 1, 64, 0.25), 16);
}

TEST(ContextWindowTest, TokenIdsAreCutRightAfterTheKeepPrefix) {
  std::vector<int32_t> prompt(100);
  std::iota(prompt.begin(), prompt.end(), 0);
  auto cut = TruncateTokens(prompt, 10, 8, 64, 0.5);
  ASSERT_TRUE(cut.ok()) << cut.status();
  // 100 + 8 is 44 over 64: two steps of 32 go, right after the 10 kept.
  EXPECT_EQ(cut->dropped_tokens, 64);
  EXPECT_EQ(cut->kept_prefix_tokens, 10);
  std::vector<int32_t> want(prompt.begin(), prompt.begin() + 10);
  want.insert(want.end(), prompt.begin() + 74, prompt.end());
  EXPECT_EQ(cut->prompt, want);

  auto fits = TruncateTokens(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40), 10, 8, 64, 0.5);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->dropped_tokens, 0);
  EXPECT_EQ(fits->prompt.size(), 40u);
}

TEST(ContextWindowTest, AKeepPrefixThatFillsTheWindowIsRefused) {
  std::vector<int32_t> prompt(100, 7);
  auto cut = TruncateTokens(prompt, 63, 8, 64, 0.5);
  EXPECT_TRUE(absl::IsInvalidArgument(cut.status())) << cut.status();
  EXPECT_NE(cut.status().message().find("prefix to keep (63 tokens)"), std::string::npos) << cut.status();
  // 62 kept and the last token: 63 < 64 leaves room for one new token.
  auto tight = TruncateTokens(prompt, 62, 8, 64, 0.5);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_EQ(tight->prompt.size(), 63u);
}

std::vector<text::ChatMessage> Conversation(int exchanges, int bytes_each) {
  std::vector<text::ChatMessage> m = {{"system", "Be brief."}};
  for (int i = 0; i < exchanges; ++i) {
    m.push_back({"user", std::string(static_cast<size_t>(bytes_each), static_cast<char>('a' + i % 26))});
    m.push_back({"assistant", std::string(static_cast<size_t>(bytes_each), static_cast<char>('A' + i % 26))});
  }
  m.push_back({"user", "and now?"});
  return m;
}

TEST(ContextWindowTest, MessagesDropTheOldestWholeExchangesAndKeepTheSystemPart) {
  text::ByteTokenizer tokenizer;
  const std::vector<text::ChatMessage> messages = Conversation(6, 30);  // 6 x 64 tokens + the rest
  auto rendered = tokenizer.RenderChat(messages);
  ASSERT_TRUE(rendered.ok());
  std::vector<text::ChatMessage> kept;
  auto cut = TruncateMessages(tokenizer, messages, 1, *rendered, 16, 256, 0.5, &kept);
  ASSERT_TRUE(cut.ok()) << cut.status();
  const int64_t over = static_cast<int64_t>(rendered->size()) + 16 - 256;
  ASSERT_GT(over, 0);
  EXPECT_GE(cut->dropped_tokens, TokensToDrop(static_cast<int64_t>(rendered->size()), 16, 256, 0.5));
  EXPECT_LE(static_cast<int64_t>(cut->prompt.size()) + 16, 256);
  ASSERT_GE(kept.size(), 2u);
  EXPECT_EQ(kept[0].role, "system");
  EXPECT_EQ(kept[1].role, "user") << "the kept conversation starts with a user message after the system part";
  EXPECT_EQ(kept.back().content, "and now?");
  EXPECT_EQ(cut->prompt, *tokenizer.RenderChat(kept)) << "the prompt is the kept messages rendered";
  EXPECT_EQ(cut->dropped_tokens, static_cast<int64_t>(rendered->size() - cut->prompt.size()));
  // The system part and the user header after it are the kept prefix.
  EXPECT_EQ(cut->kept_prefix_tokens, 1 + 2 + 9 + 1);
  // Exactly the oldest exchanges went: what is kept after the system part is the sent
  // conversation's tail.
  EXPECT_TRUE(std::equal(kept.begin() + 1, kept.end(), messages.end() - static_cast<long>(kept.size() - 1),
                         [](const text::ChatMessage& a, const text::ChatMessage& b) {
                           return a.role == b.role && a.content == b.content;
                         }));
}

// A conversation growing by one exchange a turn is cut only now and then, and between cuts
// each turn's kept conversation extends the previous one (so its stored KV is reused).
TEST(ContextWindowTest, AGrowingConversationIsCutInStepsAndExtendsTheKeptOneBetween) {
  text::ByteTokenizer tokenizer;
  std::vector<int32_t> previous;
  int cuts = 0, extended = 0;
  for (int turns = 1; turns <= 30; ++turns) {
    const std::vector<text::ChatMessage> messages = Conversation(turns, 20);
    auto cut = TruncateMessages(tokenizer, messages, 1, *tokenizer.RenderChat(messages), 16, 512, 0.5);
    ASSERT_TRUE(cut.ok()) << cut.status();
    EXPECT_LE(static_cast<int64_t>(cut->prompt.size()) + 16, 512) << "turn " << turns;
    if (!previous.empty() && cut->prompt.size() > previous.size() - 11 &&
        std::equal(previous.begin(), previous.end() - 11, cut->prompt.begin())) {
      ++extended;  // (the previous turn's last user message "and now?" is where they differ)
    } else if (!previous.empty()) {
      ++cuts;
      EXPECT_GT(cut->dropped_tokens, 0) << "turn " << turns;
    }
    previous = cut->prompt;
  }
  EXPECT_GE(cuts, 3) << "30 turns of 44 tokens on a 512-token window are cut several times";
  EXPECT_GE(extended, 20) << "most turns extend the kept conversation";
}

TEST(ContextWindowTest, ASystemPartOrLastMessageLongerThanTheWindowIsRefusedSayingWhich) {
  text::ByteTokenizer tokenizer;
  std::vector<text::ChatMessage> messages = Conversation(3, 10);
  messages[0].content = std::string(300, 's');
  auto system = TruncateMessages(tokenizer, messages, 1, *tokenizer.RenderChat(messages), 16, 256, 0.5);
  EXPECT_TRUE(absl::IsInvalidArgument(system.status())) << system.status();
  EXPECT_NE(system.status().message().find("the system part is"), std::string::npos) << system.status();

  messages = Conversation(3, 10);
  messages.back().content = std::string(300, 'u');
  auto last = TruncateMessages(tokenizer, messages, 1, *tokenizer.RenderChat(messages), 16, 256, 0.5);
  EXPECT_TRUE(absl::IsInvalidArgument(last.status())) << last.status();
  EXPECT_NE(last.status().message().find("the last message"), std::string::npos) << last.status();

  // One exchange alone: nothing to drop.
  std::vector<text::ChatMessage> one = {{"user", std::string(300, 'x')}};
  auto single = TruncateMessages(tokenizer, one, 0, *tokenizer.RenderChat(one), 16, 256, 0.5);
  EXPECT_TRUE(absl::IsInvalidArgument(single.status())) << single.status();
}

}  // namespace
}  // namespace strata::engine
