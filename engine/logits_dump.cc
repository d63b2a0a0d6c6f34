#include "engine/logits_dump.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cpu_model.h"
#include "engine/sequence_kv.h"
#include "nlohmann/json.hpp"

namespace strata::engine {

absl::StatusOr<std::string> DumpLogits(ModelWeights weights, const std::vector<std::vector<int32_t>>& sequences) {
  const uint64_t fingerprint = weights.fingerprint();
  CpuModel model(std::move(weights));
  const ModelConfig& c = model.config();
  nlohmann::json out = {{"fingerprint", absl::StrFormat("%016x", fingerprint)}, {"vocab_size", c.vocab_size}};
  out["sequences"] = nlohmann::json::array();
  for (const std::vector<int32_t>& tokens : sequences) {
    if (tokens.empty()) return absl::InvalidArgumentError("an empty token sequence");
    for (int32_t t : tokens) {
      if (t < 0 || t >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("token ", t, " is outside the vocabulary of ", c.vocab_size));
      }
    }
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    nlohmann::json steps = nlohmann::json::array();
    SequenceKv kv(c.num_layers, c.kv_dim(), n);
    for (int64_t i = 0; i < n; ++i) {
      ForwardEntry e{&kv, i, absl::Span<const int32_t>(tokens.data() + i, 1), logits.data()};
      model.Forward(absl::Span<const ForwardEntry>(&e, 1));
      steps.push_back(logits);
    }
    SequenceKv whole(c.num_layers, c.kv_dim(), n);
    ForwardEntry e{&whole, 0, absl::Span<const int32_t>(tokens), logits.data()};
    model.Forward(absl::Span<const ForwardEntry>(&e, 1));
    out["sequences"].push_back({{"tokens", tokens}, {"steps", steps}, {"prefill", logits}});
  }
  return out.dump();
}

}  // namespace strata::engine
