// ModelConfig: the shape of a Llama-family model, from HF config.json or built in.
#ifndef STRATA_MODEL_MODEL_CONFIG_H_
#define STRATA_MODEL_MODEL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/rope/rope_cpu.h"

namespace strata::model {

struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int max_context = 0;
  float rope_theta = 10000.0f;
  kernels::RopeScaling rope_scaling;
  float rms_norm_eps = 1e-5f;
  bool tie_embeddings = false;
  bool qkv_bias = false;
  // Qwen3: q and k go through a per-head RMSNorm (weights [head_dim]) before RoPE.
  bool qk_norm = false;
  // Tokens that end generation (config.json's eos_token_id, a number or a list). Not part
  // of the fingerprint: they do not change the KV.
  std::vector<int32_t> eos_token_ids;

  int kv_dim() const { return num_kv_heads * head_dim; }
  int q_dim() const { return num_heads * head_dim; }

  // InvalidArgument naming the field that is out of range or inconsistent.
  absl::Status Validate() const;
  // InvalidArgument naming the first of `tokens` outside the vocabulary.
  absl::Status CheckTokens(absl::Span<const int32_t> tokens) const;
  // A canonical text form (every field, fixed order): part of the model fingerprint.
  std::string CanonicalString() const;

  // The built-in default model: Llama architecture, small enough to stream tokens
  // interactively on a 2-core CPU, used when no --model is given.
  static ModelConfig Builtin();
  // The shapes of well-known models, for serving and benchmarking random weights without
  // a model directory: "builtin" (Builtin()), "llama3-8b" (Llama 3.1 8B: 32 layers, hidden
  // 4096, GQA 32:8, head_dim 128, 128K context) and "llama3-1b" (Llama 3.2 1B: 16 layers,
  // hidden 2048, GQA 32:8, head_dim 64, tied embeddings), "qwen3-8b" (Qwen3 8B: 36 layers,
  // hidden 4096, GQA 32:8, head_dim 128, q/k norms), "qwen2.5-7b" (28 layers, hidden 3584,
  // GQA 28:4, QKV bias). InvalidArgument naming the known names for any other.
  static absl::StatusOr<ModelConfig> Named(const std::string& name);
  // Reads an HF config.json. InvalidArgument naming a missing or bad field.
  static absl::StatusOr<ModelConfig> FromHfConfigJson(const std::string& json_text);
};

}  // namespace strata::model

#endif  // STRATA_MODEL_MODEL_CONFIG_H_
