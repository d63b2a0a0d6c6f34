// Names of shared system prompts: a prompt's id is its content (a hash of its token IDs),
// so the same tokens always get the same id, sessions saved on a prompt match it again
// after the prompt's KV was recomputed, and registering is idempotent. Its KV is stored
// once per tenant as a session of the store under a reserved session ID that clients
// cannot send (they may not contain control characters; server/chat_service.h).
#ifndef STRATA_ENGINE_SYSTEM_PROMPT_NAMES_H_
#define STRATA_ENGINE_SYSTEM_PROMPT_NAMES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "storage/session_key.h"

namespace strata::engine {

// "sp-" and 32 hex digits (XXH3-128 of the token IDs).
std::string SystemPromptId(absl::Span<const int32_t> tokens);
// Whether `id` has that form.
bool IsSystemPromptId(std::string_view id);
// The store session holding the prompt's KV, for `tenant`.
storage::SessionKey SystemPromptKey(const std::string& tenant, const std::string& id);
// What every store session ID made by SystemPromptKey starts with.
std::string_view SystemPromptSessionPrefix();
// The prompt id of a store session ID made by SystemPromptKey; nullopt for a client's.
std::optional<std::string> SystemPromptIdOfSession(std::string_view session_id);

}  // namespace strata::engine

#endif  // STRATA_ENGINE_SYSTEM_PROMPT_NAMES_H_
