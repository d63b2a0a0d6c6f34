#include "text/chat_template.h"

#include <map>
#include <utility>

#include "base/status_macros.h"
#include "text/jinja/parser.h"
#include "text/jinja/renderer.h"
#include "text/jinja/value.h"

namespace strata::text {

using jinja::Value;
using jinja::ValueList;

// The parsed template: the root block of the Jinja tree.
struct ChatTemplate::Node {
  jinja::Node block;
};

ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(std::string_view source) {
  STRATA_ASSIGN_OR_RETURN(jinja::Node block, jinja::Parse(source));
  auto root = std::make_unique<Node>();
  root->block = std::move(block);
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->root_ = std::move(root);
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 const ChatTemplateVars& vars) const {
  ValueList list;
  for (const ChatMessage& m : messages) {
    list.push_back(Value::Dict({{"role", Value::Str(m.role)}, {"content", Value::Str(m.content)}}));
  }
  std::map<std::string, Value> globals;
  globals["messages"] = Value::List(std::move(list));
  globals["bos_token"] = Value::Str(vars.bos_token);
  globals["eos_token"] = Value::Str(vars.eos_token);
  globals["add_generation_prompt"] = Value::Bool(vars.add_generation_prompt);
  return jinja::Render(root_->block, std::move(globals));
}

}  // namespace strata::text
