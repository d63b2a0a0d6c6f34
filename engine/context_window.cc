#include "engine/context_window.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace strata::engine {

absl::Status ContextWindowOptions::Validate() const {
  if (!(ratio > 0 && ratio < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("the truncation ratio must be in (0, 1), got ", ratio));
  }
  return absl::OkStatus();
}

absl::StatusOr<ContextOverflow> ParseContextOverflow(const std::string& name) {
  if (name == "truncate") return ContextOverflow::kTruncate;
  if (name == "reject") return ContextOverflow::kReject;
  return absl::InvalidArgumentError(absl::StrCat("context overflow must be truncate or reject, got '", name, "'"));
}

int64_t TokensToDrop(int64_t prompt_tokens, int64_t max_new_tokens, int64_t window, double ratio) {
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ratio * static_cast<double>(window))));
  const int64_t answer_room = std::clamp<int64_t>(max_new_tokens, 1, step);
  const int64_t over = prompt_tokens + answer_room - window;
  if (over <= 0) return 0;
  return (over + step - 1) / step * step;
}

absl::StatusOr<Truncation> TruncateTokens(std::vector<int32_t> prompt, int64_t keep_tokens, int64_t max_new_tokens,
                                          int64_t window, double ratio) {
  Truncation t;
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t drop =
      std::min(TokensToDrop(n, max_new_tokens, window, ratio), std::max<int64_t>(0, n - keep_tokens - 1));
  if (n - drop >= window) {
    return absl::InvalidArgumentError(absl::StrCat("the conversation is ", n, " tokens; the model's context holds ",
                                                   window, " and the prefix to keep (", keep_tokens,
                                                   " tokens) with the last token leaves no room for an answer"));
  }
  if (drop > 0) {
    prompt.erase(prompt.begin() + keep_tokens, prompt.begin() + keep_tokens + drop);
    t.kept_prefix_tokens = keep_tokens;
    t.dropped_tokens = drop;
  }
  t.prompt = std::move(prompt);
  return t;
}

namespace {

int64_t CommonPrefix(absl::Span<const int32_t> a, absl::Span<const int32_t> b) {
  return std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
}

}  // namespace

absl::StatusOr<Truncation> TruncateMessages(const text::Tokenizer& tokenizer,
                                            absl::Span<const text::ChatMessage> messages, size_t system_messages,
                                            std::vector<int32_t> rendered, int64_t max_new_tokens, int64_t window,
                                            double ratio, std::vector<text::ChatMessage>* kept) {
  const int64_t full = static_cast<int64_t>(rendered.size());
  const int64_t drop = TokensToDrop(full, max_new_tokens, window, ratio);
  // Exchanges after the system part: each starts at a user message (the first at whatever
  // follows the system part), so dropping whole ones keeps the roles alternating.
  std::vector<size_t> starts;
  for (size_t i = system_messages; i < messages.size(); ++i) {
    if (starts.empty() || messages[i].role == "user") starts.push_back(i);
  }
  const int64_t exchanges = static_cast<int64_t>(starts.size());
  // The system part and the exchanges from the k-th on.
  auto without = [&](int64_t k) {
    std::vector<text::ChatMessage> m(messages.begin(), messages.begin() + system_messages);
    m.insert(m.end(), messages.begin() + starts[k], messages.end());
    return m;
  };
  auto render_without = [&](int64_t k) { return tokenizer.RenderChat(without(k)); };
  Truncation t;
  if (drop == 0 || exchanges < 2) {
    if (full >= window) {
      return absl::InvalidArgumentError(absl::StrCat("the conversation is ", full,
                                                     " tokens; the model's context holds ", window,
                                                     exchanges < 2 ? " and its last message cannot be dropped" : ""));
    }
    t.prompt = std::move(rendered);
    return t;
  }
  // The least number of oldest exchanges whose removal drops `drop` tokens (all but the
  // last when none does); rendering is per call, so a binary search over the count.
  int64_t lo = 1, hi = exchanges - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    auto r = render_without(mid);
    if (!r.ok()) return r.status();
    if (full - static_cast<int64_t>(r->size()) >= drop) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  auto r = render_without(lo);
  if (!r.ok()) return r.status();
  const int64_t length = static_cast<int64_t>(r->size());
  if (length >= window) {
    const int64_t system = CommonPrefix(rendered, *r);
    if (system >= window) {
      return absl::InvalidArgumentError(
          absl::StrCat("the system part is ", system, " tokens; the model's context holds ", window));
    }
    return absl::InvalidArgumentError(absl::StrCat("the last message, with the system part, is ", length,
                                                   " tokens; the model's context holds ", window,
                                                   ": it cannot be cut to fit"));
  }
  t.kept_prefix_tokens = CommonPrefix(rendered, *r);
  t.dropped_tokens = full - length;
  if (kept != nullptr) *kept = without(lo);
  t.prompt = *std::move(r);
  return t;
}

}  // namespace strata::engine
