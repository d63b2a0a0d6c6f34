// What truncating a conversation that outgrows the context window costs in quality
// (AttentionStore §3.4, Table 1): a text streamed through a sequence one token at a time,
// scored as it goes; whenever the sequence is full, its oldest tokens are dropped and the
// newest `keep` share goes on at positions from 0, in one of three ways:
//   kStoredKv      strata's way: the kept tokens' stored KV (K before RoPE, as the session
//                  cache holds it) saved and loaded back at the new positions, K rotated
//                  there by LoadKv, nothing recomputed ("AS" in the paper);
//   kRecompute     token truncation: the kept tokens computed again from scratch ("TT");
//   kNoReRotation  the kept KV moved without re-rotation: K keeps its old positions'
//                  rotation ("NKVT", the failure a post-RoPE cache has).
// Only the tokens fed after the first truncation are scored: before it the three agree.
#ifndef STRATA_MODEL_TRUNCATION_EVAL_H_
#define STRATA_MODEL_TRUNCATION_EVAL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_backend.h"

namespace strata::model {

enum class TruncationMode { kStoredKv, kRecompute, kNoReRotation };

struct TruncationEvalOptions {
  int window = 512;   // tokens a sequence holds; full, it is truncated
  double keep = 0.5;  // share of the window kept, the newest tokens (AttentionStore: half)
  int streams = 8;    // contiguous slices of the text run side by side, one decode step each
};

struct TruncationEvalResult {
  int64_t scored_tokens = 0;
  double nll_nats = 0;
  int64_t truncations = 0;  // over all streams
  double nats_per_token() const { return scored_tokens > 0 ? nll_nats / static_cast<double>(scored_tokens) : 0; }
};

// InvalidArgument for a window below 4 or above the model's context, keep outside (0, 1),
// streams < 1, a token outside the vocabulary, or a text too short for every stream to
// truncate at least once (streams x (window + 2) tokens); the backend's errors as they come.
absl::StatusOr<TruncationEvalResult> StreamWithTruncation(ModelBackend& model, absl::Span<const int32_t> tokens,
                                                          TruncationMode mode, const TruncationEvalOptions& options);

}  // namespace strata::model

#endif  // STRATA_MODEL_TRUNCATION_EVAL_H_
