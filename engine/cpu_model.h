// CpuModel: the Llama-family forward pass on the CPU, fp32, over a batch of sequences.
//
// Reads top to bottom as the model is written: embed; for each layer (norm, qkv, rope,
// attention, residual, norm, mlp, residual); norm; logits. Every kernel it calls is batch
// invariant (kernels/cpu_kernels.h), so a token's KV and logits do not depend on what
// else is in the batch or on how a prompt was split across steps: cached and recomputed
// turns give the same tokens.
#ifndef STRATA_ENGINE_CPU_MODEL_H_
#define STRATA_ENGINE_CPU_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/model_weights.h"
#include "engine/sequence_kv.h"

namespace strata::engine {

// One sequence's share of a forward step: `tokens` sit at positions
// [start_pos, start_pos + tokens.size()); the KV of [0, start_pos) is already in `kv`.
struct ForwardEntry {
  SequenceKv* kv;
  int64_t start_pos;
  absl::Span<const int32_t> tokens;
  float* logits;  // if non-null: receives [vocab] logits of the last token
};

class CpuModel {
 public:
  explicit CpuModel(ModelWeights weights);

  const ModelConfig& config() const { return weights_.config(); }
  const ModelWeights& weights() const { return weights_; }

  // Runs one step over all entries; not thread-safe (one engine loop calls it).
  void Forward(absl::Span<const ForwardEntry> batch);

  // Places stored, position-free KV of one token into `kv` at `pos`: copies K before
  // RoPE and V, and writes K rotated for `pos`.
  void PlaceLoadedKv(SequenceKv& kv, int layer, int64_t pos, const float* k_raw,
                     const float* v) const;

 private:
  ModelWeights weights_;
  std::vector<float> inv_freq_;
  // Step workspaces, grown to the largest step seen.
  std::vector<float> x_, h_, q_, k_, v_, attn_, proj_, gate_, up_;
  std::vector<int32_t> positions_;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_CPU_MODEL_H_
