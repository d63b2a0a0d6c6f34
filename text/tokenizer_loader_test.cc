#include "text/tokenizer_loader.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "text/testing/tiny_tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/testing/temp_dir.h"

namespace strata::text {
namespace {

using testing::kTinyEndOfText;
using testing::kTinyImEnd;
using testing::kTinyImStart;

void WriteJson(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(); }

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

class TokenizerLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(testing::WriteTinyChatMlTokenizer(dir_.path())); }
  std::unique_ptr<Tokenizer> Load() {
    auto t = LoadTokenizer(dir_.path(), &note_);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  storage::testing::TempDir dir_{"strata-tokenizer"};
  std::string note_;
};

TEST_F(TokenizerLoaderTest, RendersTheTemplateThenEncodesWithSpecialTokens) {
  auto t = Load();
  ASSERT_NE(t, nullptr);
  auto ids = t->RenderChat({{"user", "hello world"}});
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto want = t->Encode(
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhello world<|im_end|>\n"
      "<|im_start|>assistant\n");
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(*ids, *want);
  EXPECT_EQ(ids->front(), kTinyImStart);
  EXPECT_EQ(ids->back(), '\n');
  EXPECT_EQ(t->vocab_size(), testing::kTinyVocabSize);
  EXPECT_NE(note_.find("ChatML"), std::string::npos) << note_;
  // Decoding the prompt's text tokens gives the text back; special tokens decode to "".
  std::string text;
  for (int32_t id : *ids) text += t->TokenBytes(id);
  EXPECT_EQ(text, "system\nYou are a helpful assistant.\nuser\nhello world\nassistant\n");
}

TEST_F(TokenizerLoaderTest, StopTokensComeFromEveryConfigAndTheTemplatesTurnEnd) {
  WriteJson(dir_.path() + "/config.json", {{"eos_token_id", kTinyEndOfText}});
  WriteJson(dir_.path() + "/generation_config.json", {{"eos_token_id", {kTinyEndOfText, 7}}});
  auto t = Load();
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->IsStopToken(kTinyEndOfText));
  EXPECT_TRUE(t->IsStopToken(7));
  EXPECT_TRUE(t->IsStopToken(kTinyImEnd));  // eos_token, and the template's turn end
  EXPECT_FALSE(t->IsStopToken(kTinyImStart));
  std::vector<int32_t> silent = t->SilentTokens();
  EXPECT_EQ(silent, std::vector<int32_t>{kTinyImStart});
}

// Item 3 of issue 7: the session cache reuses the longest common token prefix, so a
// conversation must re-tokenize to the same prefix when a turn is appended.
TEST_F(TokenizerLoaderTest, AppendingATurnReTokenizesToTheSamePrefix) {
  auto t = Load();
  ASSERT_NE(t, nullptr);
  auto one = t->RenderChat({{"system", "be short"}, {"user", "hello"}});
  auto answer = t->Encode("hello world");
  auto two = t->RenderChat({{"system", "be short"}, {"user", "hello"}, {"assistant", "hello world"}, {"user", "more"}});
  ASSERT_TRUE(one.ok() && answer.ok() && two.ok());
  // What the cache holds after turn 1: the prompt, the answer, the turn-end token.
  std::vector<int32_t> stored = *one;
  stored.insert(stored.end(), answer->begin(), answer->end());
  stored.push_back(kTinyImEnd);
  EXPECT_EQ(CommonPrefix(stored, *two), stored.size()) << "the whole first turn is reused";
}

TEST_F(TokenizerLoaderTest, AnAnswerStartingWithANewlineMovesTheBoundaryOneTokenBack) {
  // ChatML ends the prompt with "assistant\n". An answer that starts with "\n" makes that
  // "\n\n" one token when the conversation is re-rendered, so reuse stops one token short
  // of the first turn's prompt: the last stable token. The cache stays correct (it only
  // reuses the common prefix); this test pins the cost.
  auto t = Load();
  ASSERT_NE(t, nullptr);
  auto one = t->RenderChat({{"user", "hello"}});
  auto two = t->RenderChat({{"user", "hello"}, {"assistant", "\nhello"}, {"user", "more"}});
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(CommonPrefix(*one, *two), one->size() - 1);
}

TEST_F(TokenizerLoaderTest, ADirectoryWithoutAChatTemplateServesTokenIdsOnly) {
  WriteJson(dir_.path() + "/tokenizer_config.json", {{"eos_token", "<|endoftext|>"}});
  auto t = Load();
  ASSERT_NE(t, nullptr);
  auto ids = t->RenderChat({{"user", "hi"}});
  EXPECT_TRUE(absl::IsInvalidArgument(ids.status()));
  EXPECT_NE(ids.status().message().find("token_ids"), std::string::npos) << ids.status();
  EXPECT_TRUE(t->Encode("hi").ok());
  EXPECT_NE(note_.find("token_ids only"), std::string::npos) << note_;
}

TEST_F(TokenizerLoaderTest, RefusesAnUnsupportedTemplateAtLoadNamingTheConstruct) {
  WriteJson(dir_.path() + "/tokenizer_config.json",
            {{"eos_token", "<|im_end|>"}, {"chat_template", "{% for m in messages %}{{ m.content|wordwrap(5) }}{% endfor %}"}});
  auto filter = LoadTokenizer(dir_.path());
  EXPECT_TRUE(absl::IsInvalidArgument(filter.status()));
  EXPECT_NE(filter.status().message().find("unsupported filter 'wordwrap'"), std::string::npos) << filter.status();
  WriteJson(dir_.path() + "/tokenizer_config.json",
            {{"eos_token", "<|im_end|>"}, {"chat_template", "{% macro m() %}{% endmacro %}"}});
  EXPECT_TRUE(absl::IsInvalidArgument(LoadTokenizer(dir_.path()).status()));
}

TEST_F(TokenizerLoaderTest, RejectsBadConversationsAndMissingFiles) {
  auto t = Load();
  ASSERT_NE(t, nullptr);
  auto role = t->RenderChat({{"user", "a"}, {"tool", "b"}});
  EXPECT_TRUE(absl::IsInvalidArgument(role.status()));
  EXPECT_NE(role.status().message().find("message 1"), std::string::npos);
  EXPECT_TRUE(absl::IsInvalidArgument(t->RenderChat({{"user", "\xff"}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(t->RenderChat({}).status()));

  storage::testing::TempDir empty("strata-tokenizer");
  EXPECT_TRUE(absl::IsNotFound(LoadTokenizer(empty.path()).status()));
  EXPECT_FALSE(HasTokenizerFile(empty.path()));
  std::ofstream(empty.path() + "/tokenizer.json") << "{ not json";
  EXPECT_TRUE(absl::IsInvalidArgument(LoadTokenizer(empty.path()).status()));
  WriteJson(empty.path() + "/tokenizer.json", testing::TinyTokenizerJson());
  EXPECT_TRUE(absl::IsInvalidArgument(LoadTokenizer(empty.path()).status()))  // no eos anywhere
      << "a directory with no stop token is refused";
}

}  // namespace
}  // namespace strata::text
