// DumpLogits: a model's logits for given token sequences, as JSON, so that an outside
// reference (HF transformers, tests/gpu/check_hf_logits.py) can check the forward pass.
#ifndef STRATA_MODEL_LOGITS_DUMP_H_
#define STRATA_MODEL_LOGITS_DUMP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_backend.h"

namespace strata::model {

// For each sequence: "steps", the logits after each token fed one step at a time (the
// first as a prefill of one token, the rest as decode steps against the KV so far), and
// "prefill", the last token's logits with the whole sequence as one prefill. Returns
// {"fingerprint": hex, "vocab_size": V, "sequences": [{"tokens", "steps", "prefill"}]}.
// InvalidArgument for an empty sequence or a token outside the vocabulary.
// Errors: the backend's (NewSequence, Forward).
absl::StatusOr<std::string> DumpLogits(ModelBackend& model, const std::vector<std::vector<int32_t>>& sequences);

}  // namespace strata::model

#endif  // STRATA_MODEL_LOGITS_DUMP_H_
