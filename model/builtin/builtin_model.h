// The built-in model: a small Llama trained on the King James Bible
// (model/builtin/train.py) whose config.json and model.safetensors are linked
// into the binary, so that `strata serve` with no --model answers readable
// English on any machine, with nothing to download. model/builtin/ is also a
// Hugging Face model directory of the same weights.
#ifndef STRATA_MODEL_BUILTIN_BUILTIN_MODEL_H_
#define STRATA_MODEL_BUILTIN_BUILTIN_MODEL_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/model_weights.h"

namespace strata::model {

// The linked-in files, as they are in model/builtin/.
absl::string_view BuiltinConfigJson();
absl::Span<const std::byte> BuiltinSafetensors();

// The built-in model's weights (converted to fp32, as every loader does). Their
// fingerprint comes from the file, as for any model directory: the same as
// ModelWeights::LoadDirectory("model/builtin") gives.
absl::StatusOr<ModelWeights> BuiltinWeights();

}  // namespace strata::model

#endif  // STRATA_MODEL_BUILTIN_BUILTIN_MODEL_H_
