#include "model/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata::model {
namespace {

// One window: inputs tokens[start, end); the predictions from inputs [begin,
// end) are scored (targets tokens[begin + 1, end + 1)).
struct Window {
  int64_t start, begin, end;
  std::unique_ptr<SequenceState> seq;
};

}  // namespace

double NegativeLogLikelihood(absl::Span<const float> logits, int32_t target) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - top);
  return std::log(sum) - (static_cast<double>(logits[static_cast<size_t>(target)]) - top);
}

absl::StatusOr<PerplexityResult> TeacherForcedNll(ModelBackend& model, absl::Span<const int32_t> tokens,
                                                  const PerplexityOptions& o) {
  const ModelConfig& c = model.config();
  if (tokens.size() < 2) return absl::InvalidArgumentError("perplexity needs at least 2 tokens");
  if (o.stride < 1 || o.window < o.stride || o.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("window ", o.window, ", stride ", o.stride, ", batch ", o.batch,
                                                   ": need 1 <= stride <= window and batch >= 1"));
  }
  if (o.window > c.max_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("window ", o.window, " is past the model's context of ", c.max_context, " tokens"));
  }
  if (absl::Status s = c.CheckTokens(tokens); !s.ok()) return s;
  const int64_t last = static_cast<int64_t>(tokens.size()) - 1;  // the last input to score from
  std::vector<Window> all;
  for (int64_t begin = 0; begin < last; begin += o.stride) {
    const int64_t end = std::min<int64_t>(begin + o.stride, last);
    all.push_back({std::max<int64_t>(0, end - o.window), begin, end, nullptr});
  }

  PerplexityResult result;
  std::vector<std::vector<float>> logits(static_cast<size_t>(o.batch), std::vector<float>(c.vocab_size));
  for (size_t first = 0; first < all.size(); first += static_cast<size_t>(o.batch)) {
    const size_t n = std::min(all.size() - first, static_cast<size_t>(o.batch));
    absl::Span<Window> group(all.data() + first, n);
    std::vector<ForwardEntry> batch;
    for (Window& w : group) {
      auto seq = model.NewSequence(w.end - w.start);
      if (!seq.ok()) return seq.status();
      w.seq = *std::move(seq);
      if (w.begin > w.start) {  // the context, in one prefill
        batch.push_back({w.seq.get(), 0, tokens.subspan(w.start, w.begin - w.start)});
      }
    }
    if (!batch.empty()) {
      if (absl::Status s = model.Forward(batch); !s.ok()) return s;
    }
    // One decode step per scored input, the windows side by side.
    for (int64_t t = 0;; ++t) {
      batch.clear();
      std::vector<Window*> stepped;
      for (size_t i = 0; i < n; ++i) {
        Window& w = group[i];
        if (w.begin + t >= w.end) continue;
        batch.push_back({w.seq.get(), w.begin - w.start + t, tokens.subspan(w.begin + t, 1), logits[i].data()});
        stepped.push_back(&w);
      }
      if (batch.empty()) break;
      if (absl::Status s = model.Forward(batch); !s.ok()) return s;
      for (size_t j = 0; j < stepped.size(); ++j) {
        const Window& w = *stepped[j];
        const size_t slot = static_cast<size_t>(&w - group.data());
        result.nll_nats += NegativeLogLikelihood(logits[slot], tokens[w.begin + t + 1]);
        ++result.scored_tokens;
      }
    }
    for (Window& w : group) w.seq.reset();
  }
  return result;
}

}  // namespace strata::model
