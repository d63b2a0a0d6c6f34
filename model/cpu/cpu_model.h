// CpuModel: the Llama-family forward pass on the CPU, fp32, over a batch of sequences.
//
// Reads top to bottom as the model is written: embed; for each layer (norm, qkv, rope,
// attention, residual, norm, mlp, residual); norm; logits. Every kernel it calls is batch
// invariant (kernels/cpu_dot.h), so a token's KV and logits do not depend on what
// else is in the batch or on how a prompt was split across steps: cached and recomputed
// turns give the same tokens.
#ifndef STRATA_MODEL_CPU_CPU_MODEL_H_
#define STRATA_MODEL_CPU_CPU_MODEL_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "model/model_backend.h"
#include "model/model_weights.h"
#include "model/cpu/sequence_kv.h"

namespace strata::model {

// The CPU backend: fp32 weights and KV; stores fp32 K/V rows. Its sequences are
// SequenceKv (contiguous per sequence, allocated on demand: NewSequence never runs out).
class CpuModel final : public ModelBackend {
 public:
  explicit CpuModel(ModelWeights weights);

  const ModelConfig& config() const override { return weights_.config(); }
  std::string name() const override { return "cpu"; }
  uint64_t fingerprint() const override { return weights_.fingerprint(); }
  int64_t kv_row_bytes() const override { return int64_t{config().kv_dim()} * 4; }
  const ModelWeights& weights() const { return weights_; }

  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequence(int64_t capacity_tokens) override;
  bool shares_prefixes() const override { return true; }
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceOnPrefix(std::shared_ptr<const SequenceState> prefix,
                                                                     int64_t prefix_tokens,
                                                                     int64_t capacity_tokens) override;
  absl::Status ResizeSequence(SequenceState& seq, int64_t capacity_tokens) override;
  absl::Status Forward(absl::Span<const ForwardEntry> batch) override;
  absl::Status LoadKv(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                      const storage::ChunkLayout& layout) override;
  absl::Status LoadKvRows(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                          const storage::ChunkLayout& layout, int first_row) override;
  absl::Status SaveKv(const SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                      const storage::ChunkLayout& layout) override;
  KvTransferStats kv_transfer_stats() const override;

  // Places stored, position-free KV of one token into `kv` at `pos`: copies K before
  // RoPE and V, and writes K rotated for `pos`.
  void PlaceLoadedKv(SequenceKv& kv, int layer, int64_t pos, const float* k_raw,
                     const float* v) const;

 private:
  // Attention of one layer for the step's entries (q_ rows in batch order into attn_):
  // plain causal attention for sequences of their own, relay attention (the prefix read
  // once per group) for the sequences on each shared prefix.
  void Attend(absl::Span<const ForwardEntry> batch, const std::vector<SequenceKv*>& kvs, int layer);

  ModelWeights weights_;
  std::vector<float> inv_freq_;
  // Step workspaces, grown to the largest step seen.
  std::vector<float> x_, h_, q_, k_, v_, attn_, proj_, gate_, up_, logits_, relay_q_, relay_out_;
  std::vector<int32_t> positions_;
  // Bytes of stored rows placed and saved (read by metrics scrapes on other threads).
  std::atomic<int64_t> load_bytes_{0}, save_bytes_{0};
};

}  // namespace strata::model

#endif  // STRATA_MODEL_CPU_CPU_MODEL_H_
