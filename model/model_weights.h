// ModelWeights: every parameter of a Llama-family model in one flat fp32 buffer, with
// named views into it (llm.c style: no framework in the way).
#ifndef STRATA_MODEL_MODEL_WEIGHTS_H_
#define STRATA_MODEL_MODEL_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace strata::model {

struct LayerWeights {
  const float* attn_norm;  // [hidden]
  const float* wq;         // [q_dim][hidden]   (HF Linear layout: [out][in])
  const float* wk;         // [kv_dim][hidden]
  const float* wv;         // [kv_dim][hidden]
  const float* bq;         // [q_dim] or null
  const float* bk;         // [kv_dim] or null
  const float* bv;         // [kv_dim] or null
  const float* q_norm;     // [head_dim] or null (Qwen3: per-head RMSNorm of q, then of k)
  const float* k_norm;     // [head_dim] or null
  const float* wo;         // [hidden][q_dim]
  const float* mlp_norm;   // [hidden]
  const float* w_gate;     // [ffn][hidden]
  const float* w_up;       // [ffn][hidden]
  const float* w_down;     // [hidden][ffn]
};

class ModelWeights {
 public:
  // Deterministic random weights from `seed` for the built-in model. The LM head rows of
  // tokens listed in `silent_tokens` are zero, so that a random model mostly answers in
  // tokens that make readable text.
  static ModelWeights Random(const ModelConfig& config, uint64_t seed,
                             const std::vector<int32_t>& silent_tokens);

  // Loads a Hugging Face model directory (model_loader.cc): config.json and its
  // *.safetensors (sharded through model.safetensors.index.json, or every *.safetensors
  // file), stored F32, F16 or BF16, converted to fp32. NotFound when the directory,
  // config.json or the weights are missing; InvalidArgument naming the config field or
  // the tensor that is missing, of the wrong shape or duplicated, or an architecture that
  // is not Llama, Mistral or Qwen2.
  static absl::StatusOr<ModelWeights> LoadDirectory(const std::string& dir);
  // The same from a config.json text and one safetensors file already in memory (the
  // built-in model's, linked into the binary); `name` stands for the directory in messages.
  static absl::StatusOr<ModelWeights> FromMemory(absl::string_view config_json, absl::Span<const std::byte> safetensors,
                                                 const std::string& name);
  // Writes these weights as a Hugging Face directory (config.json, safetensors in
  // `shards` files with an index when more than one) stored as `dtype`: for tests and
  // for exporting the built-in model.
  absl::Status WriteDirectory(const std::string& dir, DType dtype, int shards = 1) const;

  const ModelConfig& config() const { return config_; }
  const float* embedding() const { return embedding_; }  // [vocab][hidden]
  const LayerWeights& layer(int l) const { return layers_[l]; }
  const float* final_norm() const { return final_norm_; }
  const float* lm_head() const { return lm_head_; }  // [vocab][hidden]; may alias embedding
  // Identifies the model: XXH3-64 of the canonical config and every weight byte. Stored
  // in every chunk so that KV of one model is never served to another.
  uint64_t fingerprint() const { return fingerprint_; }
  int64_t parameter_count() const { return static_cast<int64_t>(data_.size()); }

  ModelWeights(ModelWeights&&) = default;
  ModelWeights& operator=(ModelWeights&&) = default;

 private:
  explicit ModelWeights(const ModelConfig& config);
  // Lays out the views over data_ (allocating it); returns the mutable base pointers in
  // declaration order for initialisation.
  void Layout();
  void ComputeFingerprint();
  // Fills these weights' views from `tensors` (each expected name, of the config's shape,
  // converted to fp32). InvalidArgument naming `where` and the tensor missing or misshapen.
  static absl::StatusOr<ModelWeights> FromTensors(const ModelConfig& config,
                                                  const std::map<std::string, const TensorView*>& tensors,
                                                  const std::string& where);

  ModelConfig config_;
  std::vector<float> data_;
  const float* embedding_ = nullptr;
  std::vector<LayerWeights> layers_;
  const float* final_norm_ = nullptr;
  const float* lm_head_ = nullptr;
  uint64_t fingerprint_ = 0;
};

}  // namespace strata::model

#endif  // STRATA_MODEL_MODEL_WEIGHTS_H_
