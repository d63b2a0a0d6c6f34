#include "text/chat_template.h"

#include <string>

#include "text/testing/chat_templates.h"
#include "gtest/gtest.h"

namespace strata::text {
namespace {

using testing::kChatMlTemplate;
using testing::kLlama3Template;
using testing::kMistralTemplate;

std::string Render(std::string_view source, std::vector<ChatMessage> messages, ChatTemplateVars vars = {}) {
  auto t = ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  auto out = (*t)->Render(messages, vars);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

TEST(ChatTemplateTest, RendersLlama3) {
  ChatTemplateVars vars{"<|begin_of_text|>", "<|end_of_text|>", true};
  EXPECT_EQ(Render(kLlama3Template, {{"system", "Be brief. "}, {"user", "hi"}}, vars),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, RendersChatMlWithADefaultSystemPrompt) {
  EXPECT_EQ(Render(kChatMlTemplate, {{"user", "hi"}}),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  ChatTemplateVars no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(Render(kChatMlTemplate, {{"system", "S"}, {"user", "u"}}, no_prompt),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu<|im_end|>\n");
}

TEST(ChatTemplateTest, RendersMistralWithWhitespaceControlAndSlices) {
  ChatTemplateVars vars{"<s>", "</s>", true};
  EXPECT_EQ(Render(kMistralTemplate, {{"system", "Sys"}, {"user", "a"}, {"assistant", " b "}, {"user", "c"}}, vars),
            "<s>[INST] a[/INST] b</s>[INST] Sys\n\nc[/INST]");
}

TEST(ChatTemplateTest, RaiseExceptionIsAnInvalidArgumentWithTheTemplatesMessage) {
  auto t = ChatTemplate::Parse(kMistralTemplate);
  ASSERT_TRUE(t.ok()) << t.status();
  auto out = (*t)->Render({{"user", "a"}, {"user", "b"}}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(out.status()));
  EXPECT_NE(out.status().message().find("roles must alternate"), std::string::npos) << out.status();
}

TEST(ChatTemplateTest, LoopsNamespacesFiltersAndTests) {
  constexpr char kSource[] =
      "{%- set ns = namespace(n=0, last='') -%}\n"
      "{%- for m in messages if m.role != 'system' -%}\n"
      "  {%- set ns.n = ns.n + 1 -%}{%- set ns.last = m.content -%}\n"
      "  {{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}\n"
      "{%- endfor %}\n"
      "[{{ ns.n }} {{ ns.last|upper }} {{ messages|length }} {{ (messages|first).role }} {{ x is defined }}"
      " {{ 'a,b'.split(',')|join('+') }} {{ messages[-1]['content'][::-1] }} {{ 7 // 2 }} {{ -7 % 3 }}"
      " {{ {'k': [1, 'two', none]}|tojson }} {{ 'yes' if 'c' in 'abc' else 'no' }} {{ 'x' ~ 1 }}"
      " {{ messages[5] is undefined }} {{ '  pad '.strip() }}]";
  EXPECT_EQ(Render(kSource, {{"system", "s"}, {"user", "u1"}, {"assistant", "a"}, {"user", "up"}}),
            "1/3,2/3,3/3[3 UP 4 system False a+b pu 3 2 {\"k\": [1, \"two\", null]} yes x1 True pad]");
}

TEST(ChatTemplateTest, SetInsideALoopDoesNotLeakOut) {
  EXPECT_EQ(Render("{% set x = 'out' %}{% for m in messages %}{% set x = 'in' %}{% endfor %}{{ x }}",
                   {{"user", "u"}}),
            "out");
}

TEST(ChatTemplateTest, TrimBlocksAndLstripBlocksAsTransformers) {
  // The newline after a block tag and the indentation before one are dropped.
  EXPECT_EQ(Render("{% for m in messages %}\n  {% if true %}\n[{{ m.role }}]\n  {% endif %}\n{% endfor %}\n",
                   {{"user", "u"}, {"user", "v"}}),
            "[user]\n[user]\n");
}

TEST(ChatTemplateTest, RefusesUnsupportedConstructsNamingThem) {
  auto macro = ChatTemplate::Parse("{% macro f() %}x{% endmacro %}");
  EXPECT_TRUE(absl::IsInvalidArgument(macro.status()));
  EXPECT_NE(macro.status().message().find("macro"), std::string::npos) << macro.status();
  EXPECT_TRUE(absl::IsInvalidArgument(ChatTemplate::Parse("{% if x %}unclosed").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ChatTemplate::Parse("{{ 'a' + }}").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ChatTemplate::Parse("{{ 'open").status()));

  auto filter = ChatTemplate::Parse("line1\n{{ messages|wordcount }}");
  ASSERT_TRUE(filter.ok());
  auto out = (*filter)->Render({{"user", "u"}}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(out.status()));
  EXPECT_NE(out.status().message().find("line 2: unsupported filter 'wordcount'"), std::string::npos) << out.status();
  auto call = ChatTemplate::Parse("{{ strftime_now('%d') }}");
  ASSERT_TRUE(call.ok());
  EXPECT_NE((*call)->Render({}, {}).status().message().find("unsupported function 'strftime_now'"), std::string::npos);
  auto type = ChatTemplate::Parse("{{ 'a' + 1 }}");
  ASSERT_TRUE(type.ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*type)->Render({}, {}).status()));
}

}  // namespace
}  // namespace strata::text
