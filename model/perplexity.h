// Teacher-forced negative log-likelihood of a token sequence under a model,
// over sliding windows: the measure behind `strata ppl` (perplexity and bits
// per byte of a text), for any backend, with nothing but the ModelBackend seam
// the engine uses.
//
// Windows (as Hugging Face's perplexity guide does): the sequence is scored
// `stride` tokens at a time; each scored token sees up to window - 1 tokens
// before it (the tokens before the scored run are the window's context, fed as
// one prefill and not scored again). Every token but the first is scored
// exactly once.
#ifndef STRATA_MODEL_PERPLEXITY_H_
#define STRATA_MODEL_PERPLEXITY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_backend.h"

namespace strata::model {

struct PerplexityOptions {
  int window = 1024;  // the most tokens a scored token's prediction sees, itself included
  int stride = 512;   // tokens scored per window (<= window)
  int batch = 16;     // windows run side by side, one decode step for each scored token
};

struct PerplexityResult {
  int64_t scored_tokens = 0;  // tokens.size() - 1
  double nll_nats = 0;        // the sum over scored tokens of -ln p(token | before it)
  double nats_per_token() const { return scored_tokens > 0 ? nll_nats / static_cast<double>(scored_tokens) : 0; }
};

// -ln softmax(logits)[target], computed in double.
double NegativeLogLikelihood(absl::Span<const float> logits, int32_t target);

// Scores tokens[1..] given what precedes each (tokens[0] is context only, e.g.
// BOS). InvalidArgument for fewer than 2 tokens, a token outside the
// vocabulary, stride < 1, window < stride or window above the model's context;
// the backend's errors as they come.
absl::StatusOr<PerplexityResult> TeacherForcedNll(ModelBackend& model, absl::Span<const int32_t> tokens,
                                                  const PerplexityOptions& options);

}  // namespace strata::model

#endif  // STRATA_MODEL_PERPLEXITY_H_
