// Conversations longer than the model's context window (AttentionStore §3.4): what is
// kept, what is dropped, and how much.
//
// When a turn's prompt plus the room for its answer passes the window, the conversation
// keeps its system part (or, for token IDs, a prefix the client names) and drops its
// oldest part after it: whole messages (a user message with the answers after it, so the
// kept conversation still renders validly under the chat template) for `messages`, tokens
// for `token_ids`. How much is dropped depends on the request alone, never on what the
// session cache holds, so the same conversation is cut the same way with the cache on or
// off and on every replica: the tokens to drop are the least multiple of
// ratio × window that makes the prompt fit (TokensToDrop). A growing conversation is
// therefore cut only once every ratio × window tokens (AttentionStore drops half), and the
// turns between two cuts extend the same kept conversation (its stored KV is reused as
// is).
//
// Pure functions; thread-safe.
#ifndef STRATA_ENGINE_CONTEXT_WINDOW_H_
#define STRATA_ENGINE_CONTEXT_WINDOW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "text/tokenizer.h"

namespace strata::engine {

// What a conversation longer than the window gets: cut (truncate), or refused with
// InvalidArgument (reject).
enum class ContextOverflow { kTruncate, kReject };

struct ContextWindowOptions {
  // The default for `messages` requests (a request may say otherwise). `token_ids`
  // requests are cut only when they name a prefix to keep.
  ContextOverflow overflow = ContextOverflow::kTruncate;
  // Each cut drops a multiple of this share of the window (AttentionStore: half).
  double ratio = 0.5;
  // A cut conversation's kept tokens reuse their stored KV at their new positions (K
  // rotated again; AttentionStore's truncation, no recompute). Their KV was computed
  // after the dropped tokens, so the answer is AttentionStore's approximation, not
  // bit-equal to a recomputation (docs/DESIGN.md). Off: the tokens past the cut are
  // recomputed once (token truncation), and answers equal those with the cache off.
  bool reuse_kept_kv = true;

  // InvalidArgument unless 0 < ratio < 1.
  absl::Status Validate() const;
};

// "truncate" / "reject"; InvalidArgument for anything else.
absl::StatusOr<ContextOverflow> ParseContextOverflow(const std::string& name);

// The tokens to drop from a prompt of `prompt_tokens` tokens so that it and the room for
// the answer fit `window`: 0 when they fit, else the least multiple of
// ceil(ratio × window) that makes them fit. The room for the answer is max_new_tokens,
// at most ratio × window (a longer answer stops at the window's end, as without a cut).
int64_t TokensToDrop(int64_t prompt_tokens, int64_t max_new_tokens, int64_t window, double ratio);

// A conversation as it is computed after the cut.
struct Truncation {
  std::vector<int32_t> prompt;     // the kept conversation, rendered
  int64_t kept_prefix_tokens = 0;  // its first tokens are the sent conversation's first (system part, keep prefix)
  int64_t dropped_tokens = 0;      // tokens of the sent conversation not in `prompt`; 0: nothing was cut
};

// Token IDs: keeps the first `keep_tokens` of `prompt` and drops TokensToDrop tokens
// right after them (at most all but the last token). The prompt comes back unchanged when
// it fits. InvalidArgument, saying so, when the kept prefix and the last token alone do
// not fit the window.
absl::StatusOr<Truncation> TruncateTokens(std::vector<int32_t> prompt, int64_t keep_tokens, int64_t max_new_tokens,
                                          int64_t window, double ratio);

// Messages: `rendered` is `messages` rendered by `tokenizer`; the leading `system_messages`
// are the system part (a registered prompt's included) and always kept. Drops the oldest
// whole exchanges after them (an exchange: a user message and the messages up to the
// next user message; the last one is always kept) until at least TokensToDrop tokens are
// gone, and re-renders. `*kept` (if non-null) receives the kept messages when some were
// dropped (it is left as it is otherwise). The prompt comes back unchanged when it fits or
// nothing can be dropped but it still leaves room for a token. InvalidArgument, saying which, when the system part alone, or the system
// part with the last exchange, does not fit the window; the renderer's errors as it
// gives them.
absl::StatusOr<Truncation> TruncateMessages(const text::Tokenizer& tokenizer,
                                            absl::Span<const text::ChatMessage> messages, size_t system_messages,
                                            std::vector<int32_t> rendered, int64_t max_new_tokens, int64_t window,
                                            double ratio, std::vector<text::ChatMessage>* kept = nullptr);

}  // namespace strata::engine

#endif  // STRATA_ENGINE_CONTEXT_WINDOW_H_
