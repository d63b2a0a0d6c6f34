#include "server/system_prompts.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "text/chat_template.h"
#include "text/testing/chat_templates.h"
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

// A chat template's render, a token a byte (what a template puts where, without a vocabulary).
class TemplateTokenizer final : public text::Tokenizer {
 public:
  explicit TemplateTokenizer(std::string_view source) {
    auto parsed = text::ChatTemplate::Parse(source);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (parsed.ok()) template_ = *std::move(parsed);
  }
  int vocab_size() const override { return 256; }
  absl::StatusOr<std::vector<int32_t>> RenderChat(absl::Span<const text::ChatMessage> messages) const override {
    ++renders;
    auto text = template_->Render(messages, {"<s>", "</s>", true});
    if (!text.ok()) return text.status();
    return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text->data()),
                                reinterpret_cast<const unsigned char*>(text->data()) + text->size());
  }
  std::string_view TokenBytes(int32_t) const override { return {}; }
  bool IsStopToken(int32_t) const override { return false; }
  std::string Text(absl::Span<const int32_t> tokens) const {
    return std::string(tokens.begin(), tokens.end());  // the bytes back
  }
  mutable int renders = 0;

 private:
  std::unique_ptr<text::ChatTemplate> template_;
};

// A template that folds the system text into the first user turn but takes an assistant first.
constexpr char kFoldingTemplate[] =
    "{%- set ns = namespace(system='', folded=false) -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}{%- set ns.system = m.content -%}"
    "{%- elif m.role == 'user' and not ns.folded -%}[U]{{ ns.system }} {{ m.content }}{%- set ns.folded = true -%}"
    "{%- elif m.role == 'user' -%}[U]{{ m.content }}"
    "{%- else -%}[A]{{ m.content }}{%- endif -%}"
    "{%- endfor -%}[A]";

TEST(SystemPartCacheTest, AConversationTheAssistantOpensSharesTheSystemTextUpToTheNextHeader) {
  // Llama 3 and ChatML render each message as its own block: a conversation whose first
  // message after the system's is the assistant's shares everything up to that message's
  // header (the user-first part holds the user's header, so it is not a prefix there).
  const std::string system = "You are a careful assistant. Answer in one line.";
  for (const char* source : {text::testing::kLlama3Template, text::testing::kChatMlTemplate}) {
    TemplateTokenizer tokenizer(source);
    SystemPartCache cache(&tokenizer);
    const std::vector<text::ChatMessage> opened = {
        {"system", system}, {"assistant", "Hello! How can I help?"}, {"user", "What is 2 + 2?"}};
    const std::vector<int32_t> prompt = *tokenizer.RenderChat(opened);
    tokenizer.renders = 0;
    const int64_t shared = cache.Recognise(opened, prompt);
    ASSERT_GT(shared, 0) << source;
    EXPECT_EQ(tokenizer.renders, 8) << "the two parts, and the check with the system text changed";
    const std::string part = tokenizer.Text(absl::MakeConstSpan(prompt).subspan(0, static_cast<size_t>(shared)));
    EXPECT_NE(part.find(system), std::string::npos) << "the part holds the system text: " << part;
    EXPECT_EQ(part.find("assistant\n\nHello"), std::string::npos) << "nor anything of the assistant's: " << part;
    EXPECT_EQ(part.find("Hello"), std::string::npos) << part;
    // It is where the user-first part and the assistant-first render part ways: the
    // user-first part starts with it.
    const auto user_part = *RenderSystemPart(tokenizer, {opened.data(), 1});
    ASSERT_GT(user_part.size(), static_cast<size_t>(shared));
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.begin() + shared, user_part.begin()));
    // Another conversation the assistant opens on the same system text: the same part, from the cache.
    const std::vector<text::ChatMessage> other = {{"system", system}, {"assistant", "Hi."}, {"user", "Why?"}};
    tokenizer.renders = 0;
    EXPECT_EQ(cache.Recognise(other, *tokenizer.RenderChat(other)), shared);
    EXPECT_EQ(tokenizer.renders, 1);
    // A user-first conversation keeps its own (longer) part.
    const std::vector<text::ChatMessage> asked = {{"system", system}, {"user", "What is 2 + 2?"}};
    EXPECT_EQ(cache.Recognise(asked, *tokenizer.RenderChat(asked)), static_cast<int64_t>(user_part.size()));
  }
}

TEST(SystemPartCacheTest, TemplatesThatMoveTheSystemTextForAnAssistantFirstShareNothing) {
  // Llama 2 and Mistral refuse an assistant first (roles must alternate); the folding
  // template renders the system text only inside the first user turn, after the
  // assistant's message: the tokens before the assistant's header hold none of it, so the
  // turn computes its system part inline rather than share a part every prompt would have.
  const std::vector<text::ChatMessage> opened = {
      {"system", "Be brief."}, {"assistant", "Hello!"}, {"user", "What is 2 + 2?"}};
  for (const char* source : {text::testing::kLlama2Template, text::testing::kMistralTemplate, kFoldingTemplate}) {
    TemplateTokenizer tokenizer(source);
    SystemPartCache cache(&tokenizer);
    auto prompt = tokenizer.RenderChat(opened);
    if (!prompt.ok()) continue;  // the template refuses the conversation itself
    EXPECT_EQ(cache.Recognise(opened, *prompt), 0) << source;
    EXPECT_FALSE(RenderSystemPartBeforeAssistant(tokenizer, {opened.data(), 1}).ok()) << source;
  }
  TemplateTokenizer folding(kFoldingTemplate);
  ASSERT_TRUE(folding.RenderChat(opened).ok()) << "the folding template takes the conversation";
  // Its user-first conversations still share their part, which holds the system text.
  const std::vector<text::ChatMessage> asked = {{"system", "Be brief."}, {"user", "What is 2 + 2?"}};
  SystemPartCache cache(&folding);
  const std::vector<int32_t> prompt = *folding.RenderChat(asked);
  const int64_t shared = cache.Recognise(asked, prompt);
  ASSERT_GT(shared, 0);
  EXPECT_EQ(folding.Text(absl::MakeConstSpan(prompt).subspan(0, static_cast<size_t>(shared))), "[U]Be brief. ");
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
