// The model's weights in HBM: one flat bf16/fp32 allocation with named views, filled from
// host weights (converted to bf16) or with deterministic random values made on the GPU.
//
// Layout: the embedding, the LM head (the embedding when tied), the final norm, RoPE's
// inverse frequencies, then per layer: attention norm, the fused QKV matrix [q_dim + 2
// kv_dim][hidden] (and its bias when the model has one), O, MLP norm, the fused gate/up
// matrix [2 ffn][hidden] (gate rows, then up rows), down. Matrices bf16, norms and biases
// fp32.
//
// Ownership: DeviceWeights owns the allocation; the views point into it and are valid
// while it lives. Streams: Layout and Upload copy synchronously (cudaMemcpy); FillRandom
// enqueues on the stream it is given and does not wait. Not thread-safe; the model's GPU
// must be current.
#ifndef STRATA_MODEL_CUDA_DEVICE_WEIGHTS_H_
#define STRATA_MODEL_CUDA_DEVICE_WEIGHTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "model/cuda/device_memory.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace strata::model::cuda_internal {

struct LayerDevice {
  const float* attn_norm;
  const uint16_t* wqkv;  // [q_dim + 2 kv_dim][hidden]
  const float* bqkv;     // [q_dim + 2 kv_dim] or null
  const uint16_t* wo;    // [hidden][q_dim]
  const float* mlp_norm;
  const uint16_t* wgu;    // [2 ffn][hidden]: gate rows, then up rows
  const uint16_t* wdown;  // [hidden][ffn]
  const float* q_norm;    // [head_dim] or null (Qwen3), then k_norm
  const float* k_norm;
};

struct DeviceWeights {
  // One allocation for every weight of `config` (with room for the QKV bias when
  // `qkv_bias`); fills the views and uploads inv_freq. The weights themselves are not set.
  absl::Status Layout(const ModelConfig& config, bool qkv_bias);
  // Uploads `weights` (of `config`'s shapes) into the laid-out views.
  absl::Status Upload(const ModelConfig& config, const ModelWeights& weights);
  // Enqueues on `stream` deterministic random matrices (scaled by 1/sqrt(fan-in)) and
  // norms of ones, for a layout made without the QKV bias.
  absl::Status FillRandom(const ModelConfig& config, uint64_t seed, cudaStream_t stream);

  DeviceBuffer buffer;
  int64_t bytes = 0;
  const uint16_t* embedding = nullptr;
  const uint16_t* lm_head = nullptr;
  const float* final_norm = nullptr;
  const float* inv_freq = nullptr;
  std::vector<LayerDevice> layers;
};

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_DEVICE_WEIGHTS_H_
