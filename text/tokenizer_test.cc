#include "text/tokenizer.h"

#include "gtest/gtest.h"

namespace strata::text {
namespace {

TEST(ByteTokenizerTest, RendersChatTemplate) {
  ByteTokenizer tok;
  auto ids = tok.RenderChat({{"system", "S"}, {"user", "hi"}});
  ASSERT_TRUE(ids.ok());
  std::vector<int32_t> want = {ByteTokenizer::kBos, ByteTokenizer::kSystem, 'S', ByteTokenizer::kEnd,
                               ByteTokenizer::kUser, 'h', 'i', ByteTokenizer::kEnd,
                               ByteTokenizer::kAssistant};
  EXPECT_EQ(*ids, want);
}

TEST(ByteTokenizerTest, AppendingATurnKeepsThePrefix) {
  ByteTokenizer tok;
  auto one = tok.RenderChat({{"user", "hello"}});
  auto two = tok.RenderChat({{"user", "hello"}, {"assistant", "abc"}, {"user", "more"}});
  ASSERT_TRUE(one.ok() && two.ok());
  ASSERT_GT(two->size(), one->size());
  EXPECT_TRUE(std::equal(one->begin(), one->end(), two->begin()));
}

TEST(ByteTokenizerTest, RejectsUnknownRoleAndBadUtf8AndEmpty) {
  ByteTokenizer tok;
  auto role = tok.RenderChat({{"user", "a"}, {"robot", "b"}});
  EXPECT_TRUE(absl::IsInvalidArgument(role.status()));
  EXPECT_NE(role.status().message().find("message 1"), std::string::npos) << role.status();
  EXPECT_TRUE(absl::IsInvalidArgument(tok.RenderChat({{"user", "\xff\xfe"}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(tok.RenderChat({}).status()));
}

TEST(Utf8Test, ValidatesSequences) {
  EXPECT_TRUE(IsValidUtf8("héllo 日本 🙂"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xe6\x97"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
}

TEST(Utf8StreamDecoderTest, HoldsSplitCharactersUntilComplete) {
  Utf8StreamDecoder d;
  std::string smile = "🙂";  // 4 bytes
  EXPECT_EQ(d.Feed(smile.substr(0, 1)), "");
  EXPECT_EQ(d.Feed(smile.substr(1, 2)), "");
  EXPECT_EQ(d.Feed(smile.substr(3) + "a"), smile + "a");
  EXPECT_EQ(d.Flush(), "");
}

TEST(Utf8StreamDecoderTest, ReplacesInvalidBytes) {
  Utf8StreamDecoder d;
  std::string out = d.Feed("a\xff" "b");
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(d.Feed("\xe6\x97"), "");
  EXPECT_EQ(d.Feed("x"), "\xEF\xBF\xBD\xEF\xBF\xBDx");  // a broken sequence, then x
  EXPECT_TRUE(IsValidUtf8(d.Feed("\xe6") + d.Flush()));
}

}  // namespace
}  // namespace strata::text
