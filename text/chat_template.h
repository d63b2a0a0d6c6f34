// ChatTemplate: renders the `chat_template` of a Hugging Face tokenizer_config.json.
//
// It is a small interpreter of the Jinja subset that chat templates use, run with the
// settings `transformers` uses (trim_blocks, lstrip_blocks, loop controls; the trailing
// newline of the template dropped):
//   statements  if / elif / else, for ... in ... (with else, loop.index0/index/first/last/
//               length/revindex), set (names and namespace attributes), break, continue
//   expressions string / number / list / dict literals, names, `.attr`, `[key]`, slices,
//               calls, `|filter`, `is [not] test`, `not and or`, `== != < <= > >= in`,
//               `+ - * / // % ~`, `a if c else b`
//   built-ins   raise_exception, namespace, range; filters trim, length, upper, lower,
//               string, default, first, last, join, tojson, capitalize, replace, list;
//               string methods strip/lstrip/rstrip/startswith/endswith/split/upper/lower/
//               replace/title, dict methods items/keys/values/get
// Anything else (macros, call blocks, filters or tests not listed) is refused: at Parse
// for syntax, at Render for a name first met at run time, always naming the construct
// and the template line, so an unsupported template fails loudly, never renders wrong.
#ifndef STRATA_TEXT_CHAT_TEMPLATE_H_
#define STRATA_TEXT_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "text/tokenizer.h"

namespace strata::text {

// The variables a chat template sees besides `messages`.
struct ChatTemplateVars {
  std::string bos_token;
  std::string eos_token;
  bool add_generation_prompt = true;
};

// Immutable after Parse; Render is const and thread-safe.
class ChatTemplate {
 public:
  // InvalidArgument naming the line and the construct when `source` is malformed or
  // uses a statement this interpreter does not support.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(std::string_view source);
  ~ChatTemplate();

  // The template's text for `messages` (each a dict with `role` and `content`).
  // InvalidArgument with the template's own message for `raise_exception(...)` (e.g.
  // "Conversation roles must alternate"), or naming the construct and line for an
  // unsupported filter / test / method or a type error met while rendering.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages, const ChatTemplateVars& vars) const;

  struct Node;  // the parsed template (defined in chat_template.cc)

 private:
  ChatTemplate() = default;
  std::unique_ptr<Node> root_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_CHAT_TEMPLATE_H_
