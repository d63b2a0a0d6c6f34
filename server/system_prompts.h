// Shared system prompts on the server side: the system part of a conversation under the
// model's chat template, and the registrations a tenant made (kept in a file across
// restarts when the server has one).
#ifndef STRATA_SERVER_SYSTEM_PROMPTS_H_
#define STRATA_SERVER_SYSTEM_PROMPTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "text/tokenizer.h"

namespace strata::server {

// The tokens every conversation that starts with `system` (system messages) shares under
// the tokenizer's chat template, up to where the first user message's content begins: the
// longest common prefix of the conversation rendered with two different user messages.
// InvalidArgument when the template renders nothing in common (or cannot render).
absl::StatusOr<std::vector<int32_t>> RenderSystemPart(const text::Tokenizer& tokenizer,
                                                      absl::Span<const text::ChatMessage> system);

// The system part of a conversation the assistant opens (a greeting before the user's first
// message): the tokens both a user's and an assistant's first message follow (the common
// prefix of RenderSystemPart and the conversation rendered with two different assistant
// messages first), so without the user's header. InvalidArgument where that prefix does not
// hold the whole system text (templates that fold it into the first user turn, or refuse an
// assistant first): such conversations compute their system part inline.
absl::StatusOr<std::vector<int32_t>> RenderSystemPartBeforeAssistant(const text::Tokenizer& tokenizer,
                                                                     absl::Span<const text::ChatMessage> system);

// Recognises the system part of conversations on the request path. The same few system
// prompts come back turn after turn, so each one's part is rendered once and kept (up to
// `capacity` of them; past that the cache starts over). Thread-safe.
class SystemPartCache {
 public:
  explicit SystemPartCache(const text::Tokenizer* tokenizer, size_t capacity = 256)
      : tokenizer_(tokenizer), capacity_(capacity) {}
  // The length of the leading system messages' part when that is a prefix of `prompt`
  // (`messages` rendered) shorter than it, else 0 (nothing shared).
  int64_t Recognise(absl::Span<const text::ChatMessage> messages, absl::Span<const int32_t> prompt);

 private:
  const text::Tokenizer* tokenizer_;
  const size_t capacity_;
  Mutex mu_;
  // Keyed by the system messages (role and content, '\0'-separated); an empty part when
  // the template renders none.
  std::map<std::string, std::shared_ptr<const std::vector<int32_t>>> parts_ ABSL_GUARDED_BY(mu_);
};

// Whether `part` is a prefix of `prompt` shorter than it: the tokens a turn shares.
int64_t SharedPrefixTokens(absl::Span<const int32_t> part, absl::Span<const int32_t> prompt);

// The prompts tenants registered, by (tenant, id): their tokens, and the system messages
// they were rendered from (none for a prompt registered as token IDs).
// With a file, every change is written to it (a new file synced, then renamed over the
// old, the directory synced) before it is acknowledged, and Open() reads it back.
// Thread-safe.
class SystemPromptRegistry {
 public:
  struct Registration {
    std::vector<text::ChatMessage> messages;  // system messages; empty for token IDs
    std::vector<int32_t> tokens;              // the prompt as the model sees it
  };
  // `file` "" keeps registrations in memory only. A file that does not parse is
  // InvalidArgument (naming it); a missing one is an empty registry. Registrations are
  // for the model whose fingerprint the file names (their tokens are its tokenizer's): a
  // file written for another model opens empty, as the store drops that model's sessions
  // (the prompts are registered again); 0 (or a file that names none) takes them as they are.
  static absl::StatusOr<std::unique_ptr<SystemPromptRegistry>> Open(std::string file, uint64_t model_fingerprint = 0);

  absl::Status Add(const std::string& tenant, const std::string& id, Registration registration);
  // Whether there was one; the file is rewritten first.
  absl::StatusOr<bool> Remove(const std::string& tenant, const std::string& id);
  // NotFound when the tenant registered no prompt `id` (or dropped it).
  absl::StatusOr<Registration> Find(const std::string& tenant, const std::string& id) const;
  // The tenant's registered ids.
  std::vector<std::string> Ids(const std::string& tenant) const;

 private:
  SystemPromptRegistry(std::string file, uint64_t model_fingerprint)
      : file_(std::move(file)), model_fingerprint_(model_fingerprint) {}
  absl::Status WriteLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string file_;
  const uint64_t model_fingerprint_;
  mutable Mutex mu_;
  std::map<std::pair<std::string, std::string>, Registration> registrations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::server

#endif  // STRATA_SERVER_SYSTEM_PROMPTS_H_
