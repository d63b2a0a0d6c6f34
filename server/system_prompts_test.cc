#include "server/system_prompts.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "text/tokenizer.h"

namespace strata::server {
namespace {

// The built-in tokenizer, counting how often a conversation is rendered.
class CountingTokenizer final : public text::Tokenizer {
 public:
  int vocab_size() const override { return inner_.vocab_size(); }
  absl::StatusOr<std::vector<int32_t>> RenderChat(absl::Span<const text::ChatMessage> messages) const override {
    ++renders;
    return inner_.RenderChat(messages);
  }
  std::string_view TokenBytes(int32_t token) const override { return inner_.TokenBytes(token); }
  bool IsStopToken(int32_t token) const override { return inner_.IsStopToken(token); }
  mutable int renders = 0;

 private:
  text::ByteTokenizer inner_;
};

TEST(SystemPartCacheTest, RecognisesTheSystemPartAndRendersEachPromptOnce) {
  CountingTokenizer tokenizer;
  SystemPartCache cache(&tokenizer, /*capacity=*/2);
  auto conversation = [&](const std::string& system, const std::string& user) {
    return std::vector<text::ChatMessage>{{"system", system}, {"user", user}};
  };
  const auto a = conversation("Be brief.", "Hello");
  const std::vector<int32_t> prompt = *tokenizer.RenderChat(a);
  const auto part = *RenderSystemPart(tokenizer, {a.data(), 1});
  tokenizer.renders = 0;
  EXPECT_EQ(cache.Recognise(a, prompt), static_cast<int64_t>(part.size()));
  EXPECT_EQ(tokenizer.renders, 2) << "the part is the common prefix of two renders";
  EXPECT_EQ(cache.Recognise(conversation("Be brief.", "Another"), *tokenizer.RenderChat(conversation("Be brief.",
                                                                                                       "Another"))),
            static_cast<int64_t>(part.size()));
  EXPECT_EQ(tokenizer.renders, 3) << "the second conversation's part came from the cache (one render: its prompt)";
  // No system message, only system messages, or a part that is not the prompt's prefix.
  const std::vector<text::ChatMessage> user_only = {{"user", "x"}}, system_only = {{"system", "Be brief."}};
  EXPECT_EQ(cache.Recognise(user_only, prompt), 0);
  EXPECT_EQ(cache.Recognise(system_only, prompt), 0);
  EXPECT_EQ(cache.Recognise(a, std::vector<int32_t>(part.begin(), part.end())), 0) << "nothing after the part";
  // Past its capacity the cache starts over, and still answers.
  cache.Recognise(conversation("One.", "x"), prompt);
  cache.Recognise(conversation("Two.", "x"), prompt);
  tokenizer.renders = 0;
  EXPECT_EQ(cache.Recognise(a, prompt), static_cast<int64_t>(part.size()));
  EXPECT_EQ(tokenizer.renders, 2);
}

TEST(SystemPromptRegistryTest, RegistrationsSurviveReopeningTheFile) {
  storage::testing::TempDir dir("strata-prompt-registry");
  const std::string file = dir.path() + "/system_prompts.json";
  {
    auto registry = SystemPromptRegistry::Open(file);
    ASSERT_TRUE(registry.ok()) << registry.status();
    ASSERT_TRUE((*registry)->Add("t", "sp-a", {{{"system", "Be brief."}}, {1, 2, 3}}).ok());
    ASSERT_TRUE((*registry)->Add("t", "sp-b", {{}, {7, 8}}).ok());
    ASSERT_TRUE((*registry)->Add("u", "sp-b", {{}, {9}}).ok());
    EXPECT_TRUE(*(*registry)->Remove("u", "sp-b"));
    EXPECT_FALSE(*(*registry)->Remove("u", "sp-b"));
  }
  auto registry = SystemPromptRegistry::Open(file);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto a = (*registry)->Find("t", "sp-a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_EQ(a->messages.size(), 1u);
  EXPECT_EQ(a->messages[0].content, "Be brief.");
  EXPECT_EQ((*registry)->Find("t", "sp-b")->tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(absl::IsNotFound((*registry)->Find("u", "sp-b").status())) << "removed before the reopen";
  EXPECT_EQ((*registry)->Ids("t"), (std::vector<std::string>{"sp-a", "sp-b"}));
  // Registered again by its token IDs, a prompt registered by its messages keeps them.
  ASSERT_TRUE((*registry)->Add("t", "sp-a", {{}, {1, 2, 3}}).ok());
  ASSERT_EQ((*registry)->Find("t", "sp-a")->messages.size(), 1u);
  EXPECT_EQ((*registry)->Find("t", "sp-a")->messages[0].content, "Be brief.");
  // Written for another model: opens empty (the tokens are another tokenizer's); for this
  // one, or without a fingerprint, as written.
  {
    auto mine = SystemPromptRegistry::Open(file + ".fp", 0x1234);
    ASSERT_TRUE(mine.ok());
    ASSERT_TRUE((*mine)->Add("t", "sp-a", {{}, {1, 2, 3}}).ok());
  }
  EXPECT_EQ((*SystemPromptRegistry::Open(file + ".fp", 0x1234))->Ids("t"), (std::vector<std::string>{"sp-a"}));
  EXPECT_EQ((*SystemPromptRegistry::Open(file + ".fp", 0))->Ids("t"), (std::vector<std::string>{"sp-a"}));
  EXPECT_TRUE((*SystemPromptRegistry::Open(file + ".fp", 0x5678))->Ids("t").empty()) << "another model's";
  EXPECT_EQ((*SystemPromptRegistry::Open(file, 0x5678))->Ids("t"), (std::vector<std::string>{"sp-a", "sp-b"}))
      << "a file that names no model";
  // A file that does not parse is refused, naming it.
  std::ofstream(file) << "{not json";
  auto broken = SystemPromptRegistry::Open(file);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(std::string(broken.status().message()).find(file), std::string::npos);
}

}  // namespace
}  // namespace strata::server
