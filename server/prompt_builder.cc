#include "server/prompt_builder.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/context_window.h"

namespace strata::server {
namespace {

// The cut conversation is what the turn computes.
void TakeCut(engine::Truncation cut, engine::TurnRequest* turn) {
  turn->prompt = std::move(cut.prompt);
  turn->truncated_tokens = cut.dropped_tokens;
  turn->kept_prefix_tokens = cut.kept_prefix_tokens;
}

}  // namespace

engine::ContextOverflow PromptBuilder::Overflow(const v1::ChatRequest& request) const {
  switch (request.context_overflow()) {
    case v1::CONTEXT_OVERFLOW_TRUNCATE: return engine::ContextOverflow::kTruncate;
    case v1::CONTEXT_OVERFLOW_REJECT: return engine::ContextOverflow::kReject;
    default: break;
  }
  // token_ids are cut only after a prefix their client names; messages by the server's default.
  if (request.messages_size() == 0) {
    return request.has_keep_prefix_tokens() ? engine::ContextOverflow::kTruncate : engine::ContextOverflow::kReject;
  }
  return engine_->context_window().overflow;
}

absl::Status PromptBuilder::Build(const std::string& tenant, const v1::ChatRequest& request,
                                  engine::TurnRequest* turn) const {
  if (!v1::ContextOverflow_IsValid(request.context_overflow())) {
    return absl::InvalidArgumentError(absl::StrCat("context_overflow ", request.context_overflow(),
                                                   " is none of UNSPECIFIED, TRUNCATE, REJECT"));
  }
  std::optional<SystemPromptRegistry::Registration> system;
  if (!request.system_prompt_id().empty()) {
    auto registered = registry_->Find(tenant, request.system_prompt_id());
    if (!registered.ok()) return registered.status();
    system = *std::move(registered);
  }
  if (request.messages_size() > 0) {
    if (request.system_prefix_tokens() > 0) {
      return absl::InvalidArgumentError("system_prefix_tokens is for token_ids; messages name their system part");
    }
    std::vector<text::ChatMessage> messages;
    if (system.has_value()) {
      if (system->messages.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("system prompt ", request.system_prompt_id(),
                                                       " is known by its token IDs: send token_ids with it"));
      }
      messages = system->messages;
    }
    messages.reserve(messages.size() + static_cast<size_t>(request.messages_size()));
    for (const v1::Message& m : request.messages()) {
      if (system.has_value() && m.role() == "system") {
        return absl::InvalidArgumentError("with system_prompt_id the system messages come from the prompt");
      }
      messages.push_back({m.role(), m.content()});
    }
    if (request.has_keep_prefix_tokens()) {
      return absl::InvalidArgumentError("keep_prefix_tokens is for token_ids; messages keep their system part");
    }
    auto rendered = tokenizer_->RenderChat(messages);
    if (!rendered.ok()) return rendered.status();
    turn->prompt = *std::move(rendered);
    if (Overflow(request) == engine::ContextOverflow::kTruncate) {
      size_t system_messages = 0;
      while (system_messages < messages.size() && messages[system_messages].role == "system") ++system_messages;
      std::vector<text::ChatMessage> kept;
      const engine::ContextWindowOptions& cw = engine_->context_window();
      auto cut = engine::TruncateMessages(*tokenizer_, messages, system_messages, std::move(turn->prompt),
                                          request.max_new_tokens(), engine_->context_tokens(), cw.ratio, &kept);
      if (!cut.ok()) return cut.status();
      if (cut->dropped_tokens > 0) messages = std::move(kept);
      TakeCut(*std::move(cut), turn);
    }
    // A registered prompt's part is known; another conversation's is recognised (as is a
    // registered prompt's in a conversation the assistant opens, whose part lacks the user's
    // header). Where the template did not render it as a prefix of the prompt, it is
    // computed inline.
    turn->system_tokens = system.has_value() ? SharedPrefixTokens(system->tokens, turn->prompt) : 0;
    if (turn->system_tokens == 0) turn->system_tokens = system_parts_.Recognise(messages, turn->prompt);
  } else {
    if (system.has_value()) turn->prompt = system->tokens;
    turn->prompt.insert(turn->prompt.end(), request.token_ids().begin(), request.token_ids().end());
    turn->system_tokens = system.has_value() ? static_cast<int64_t>(system->tokens.size()) : 0;
    if (request.system_prefix_tokens() > 0) {
      if (system.has_value()) {
        return absl::InvalidArgumentError("give system_prompt_id or system_prefix_tokens, not both");
      }
      if (request.system_prefix_tokens() >= static_cast<uint32_t>(request.token_ids_size())) {
        return absl::InvalidArgumentError(absl::StrCat("system_prefix_tokens (", request.system_prefix_tokens(),
                                                       ") must be less than the tokens sent (",
                                                       request.token_ids_size(), ")"));
      }
      turn->system_tokens = request.system_prefix_tokens();
    }
    if (request.has_keep_prefix_tokens() &&
        request.keep_prefix_tokens() >= static_cast<uint32_t>(request.token_ids_size())) {
      return absl::InvalidArgumentError(absl::StrCat("keep_prefix_tokens (", request.keep_prefix_tokens(),
                                                     ") must be less than the tokens sent (", request.token_ids_size(),
                                                     ")"));
    }
    if (Overflow(request) == engine::ContextOverflow::kTruncate) {
      // Without a keep prefix only an explicit TRUNCATE gets here (Overflow).
      if (!request.has_keep_prefix_tokens()) {
        return absl::InvalidArgumentError("token_ids are cut only after a prefix the client names: give "
                                          "keep_prefix_tokens");
      }
      // A shared prompt is always kept: its KV is every session's on it.
      const int64_t keep = (system.has_value() ? static_cast<int64_t>(system->tokens.size()) : 0) +
                           std::max<int64_t>(request.keep_prefix_tokens(), request.system_prefix_tokens());
      auto cut = engine::TruncateTokens(std::move(turn->prompt), keep, request.max_new_tokens(),
                                        engine_->context_tokens(), engine_->context_window().ratio);
      if (!cut.ok()) return cut.status();
      TakeCut(*std::move(cut), turn);
    }
  }
  if (turn->prompt.empty() || (request.messages_size() == 0 && request.token_ids_size() == 0)) {
    return absl::InvalidArgumentError("the conversation is empty: give messages or token_ids");
  }
  return absl::OkStatus();
}

}  // namespace strata::server
