#include "model/logits_dump.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace strata::model {

absl::StatusOr<std::string> DumpLogits(ModelBackend& model, const std::vector<std::vector<int32_t>>& sequences) {
  const uint64_t fingerprint = model.fingerprint();
  const ModelConfig& c = model.config();
  nlohmann::json out = {{"fingerprint", absl::StrFormat("%016x", fingerprint)}, {"vocab_size", c.vocab_size}};
  out["sequences"] = nlohmann::json::array();
  for (const std::vector<int32_t>& tokens : sequences) {
    if (tokens.empty()) return absl::InvalidArgumentError("an empty token sequence");
    if (absl::Status s = c.CheckTokens(tokens); !s.ok()) return s;
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    nlohmann::json steps = nlohmann::json::array();
    auto stepped = model.NewSequence(n);
    if (!stepped.ok()) return stepped.status();
    for (int64_t i = 0; i < n; ++i) {
      ForwardEntry e{stepped->get(), i, absl::Span<const int32_t>(tokens.data() + i, 1), logits.data()};
      if (absl::Status s = model.Forward(absl::Span<const ForwardEntry>(&e, 1)); !s.ok()) return s;
      steps.push_back(logits);
    }
    stepped->reset();  // its KV memory back before the next sequence takes some
    auto whole = model.NewSequence(n);
    if (!whole.ok()) return whole.status();
    ForwardEntry e{whole->get(), 0, absl::Span<const int32_t>(tokens), logits.data()};
    if (absl::Status s = model.Forward(absl::Span<const ForwardEntry>(&e, 1)); !s.ok()) return s;
    out["sequences"].push_back({{"tokens", tokens}, {"steps", steps}, {"prefill", logits}});
  }
  return out.dump();
}

}  // namespace strata::model
