// A chat turn's prompt from a ChatRequest: its messages rendered with the chat template
// (or its token IDs), its shared system prompt, its system part recognised, and the
// conversation cut to the context window when its policy says so. ChatService builds
// every turn with it; BatchService every prompt of a batch.
#ifndef STRATA_SERVER_PROMPT_BUILDER_H_
#define STRATA_SERVER_PROMPT_BUILDER_H_

#include <string>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "server/system_prompts.h"
#include "strata/v1/chat.pb.h"
#include "text/tokenizer.h"

namespace strata::server {

class PromptBuilder {
 public:
  // `registry` resolves system_prompt_id. All must outlive the builder.
  PromptBuilder(const engine::Engine* engine, const text::Tokenizer* tokenizer, const SystemPromptRegistry* registry)
      : engine_(engine), tokenizer_(tokenizer), registry_(registry), system_parts_(tokenizer) {}

  // The turn's prompt and its system part, from the request's messages or token IDs and
  // its system prompt. InvalidArgument or NotFound (an unknown prompt id) on bad input.
  // A conversation past the context window is cut to fit (engine/context_window.h) when
  // the request's policy says so; InvalidArgument when even the cut one cannot fit.
  // Thread-safe.
  absl::Status Build(const std::string& tenant, const v1::ChatRequest& request, engine::TurnRequest* turn) const;

 private:
  // The request's context-overflow policy: its own, else the server's for messages; token
  // IDs are cut only when they name keep_prefix_tokens.
  engine::ContextOverflow Overflow(const v1::ChatRequest& request) const;

  const engine::Engine* engine_;
  const text::Tokenizer* tokenizer_;
  const SystemPromptRegistry* registry_;
  mutable SystemPartCache system_parts_;  // a cache (thread-safe): Build stays const
};

}  // namespace strata::server

#endif  // STRATA_SERVER_PROMPT_BUILDER_H_
