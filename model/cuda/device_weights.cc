#include "model/cuda/device_weights.h"

#include <cmath>

#include "kernels/cuda_check.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/rope/rope_cpu.h"

namespace strata::model::cuda_internal {

namespace {

// fp32 host values to bf16 at a device address.
absl::Status UploadBf16(const float* src, int64_t n, const uint16_t* dst) {
  std::vector<uint16_t> tmp(static_cast<size_t>(n));
  kernels::ToBf16(src, tmp.data(), n);
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(const_cast<uint16_t*>(dst), tmp.data(), static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status UploadF32(const float* src, int64_t n, const float* dst) {
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(const_cast<float*>(dst), src, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

int64_t QkvWidth(const ModelConfig& c) { return c.q_dim() + 2 * c.kv_dim(); }

}  // namespace

absl::Status DeviceWeights::Layout(const ModelConfig& c, bool qkv_bias) {
  const int64_t h = c.hidden_size, w = QkvWidth(c), ffn = c.intermediate_size, qd = c.q_dim();
  Arena a;
  const int64_t emb = a.Add(2 * c.vocab_size * h);
  const int64_t head = c.tie_embeddings ? emb : a.Add(2 * c.vocab_size * h);
  const int64_t fnorm = a.Add(4 * h);
  const int64_t freq = a.Add(4 * c.head_dim / 2);
  struct Offsets {
    int64_t attn_norm, wqkv, bqkv, wo, mlp_norm, wgu, wdown, qk_norm;
  };
  std::vector<Offsets> off(static_cast<size_t>(c.num_layers));
  for (Offsets& o : off) {
    o.attn_norm = a.Add(4 * h);
    o.wqkv = a.Add(2 * w * h);
    o.bqkv = qkv_bias ? a.Add(4 * w) : -1;
    o.wo = a.Add(2 * h * qd);
    o.mlp_norm = a.Add(4 * h);
    o.wgu = a.Add(2 * 2 * ffn * h);
    o.wdown = a.Add(2 * h * ffn);
    o.qk_norm = c.qk_norm ? a.Add(4 * 2 * c.head_dim) : -1;
  }
  if (absl::Status s = buffer.Allocate(a.size); !s.ok()) return s;
  bytes = a.size;
  auto* base = buffer.as<std::byte>();
  embedding = reinterpret_cast<const uint16_t*>(base + emb);
  lm_head = reinterpret_cast<const uint16_t*>(base + head);
  final_norm = reinterpret_cast<const float*>(base + fnorm);
  inv_freq = reinterpret_cast<const float*>(base + freq);
  layers.clear();
  for (const Offsets& o : off) {
    layers.push_back(LayerDevice{reinterpret_cast<const float*>(base + o.attn_norm),
                                 reinterpret_cast<const uint16_t*>(base + o.wqkv),
                                 o.bqkv >= 0 ? reinterpret_cast<const float*>(base + o.bqkv) : nullptr,
                                 reinterpret_cast<const uint16_t*>(base + o.wo),
                                 reinterpret_cast<const float*>(base + o.mlp_norm),
                                 reinterpret_cast<const uint16_t*>(base + o.wgu),
                                 reinterpret_cast<const uint16_t*>(base + o.wdown),
                                 o.qk_norm >= 0 ? reinterpret_cast<const float*>(base + o.qk_norm) : nullptr,
                                 o.qk_norm >= 0 ? reinterpret_cast<const float*>(base + o.qk_norm) + c.head_dim
                                                : nullptr});
  }
  const std::vector<float> freqs = kernels::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling);
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy(const_cast<float*>(inv_freq), freqs.data(), freqs.size() * sizeof(float),
                                         cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status DeviceWeights::Upload(const ModelConfig& c, const ModelWeights& weights) {
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  if (absl::Status s = UploadBf16(weights.embedding(), c.vocab_size * h, embedding); !s.ok()) return s;
  if (!c.tie_embeddings) {
    if (absl::Status s = UploadBf16(weights.lm_head(), c.vocab_size * h, lm_head); !s.ok()) return s;
  }
  if (absl::Status s = UploadF32(weights.final_norm(), h, final_norm); !s.ok()) return s;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights.layer(l);
    const LayerDevice& d = layers[static_cast<size_t>(l)];
    for (absl::Status s : {UploadF32(w.attn_norm, h, d.attn_norm), UploadBf16(w.wq, qd * h, d.wqkv),
                           UploadBf16(w.wk, kvd * h, d.wqkv + qd * h), UploadBf16(w.wv, kvd * h, d.wqkv + (qd + kvd) * h),
                           UploadBf16(w.wo, h * qd, d.wo), UploadF32(w.mlp_norm, h, d.mlp_norm),
                           UploadBf16(w.w_gate, ffn * h, d.wgu), UploadBf16(w.w_up, ffn * h, d.wgu + ffn * h),
                           UploadBf16(w.w_down, h * ffn, d.wdown)}) {
      if (!s.ok()) return s;
    }
    if (c.qk_norm) {
      for (absl::Status s : {UploadF32(w.q_norm, c.head_dim, d.q_norm), UploadF32(w.k_norm, c.head_dim, d.k_norm)}) {
        if (!s.ok()) return s;
      }
    }
    if (c.qkv_bias) {
      for (absl::Status s : {UploadF32(w.bq, qd, d.bqkv), UploadF32(w.bk, kvd, d.bqkv + qd),
                             UploadF32(w.bv, kvd, d.bqkv + qd + kvd)}) {
        if (!s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceWeights::FillRandom(const ModelConfig& c, uint64_t seed, cudaStream_t st) {
  const int64_t h = c.hidden_size, ffn = c.intermediate_size, qd = c.q_dim();
  uint64_t k = seed;
  auto rnd = [&](const uint16_t* p, int64_t n, int64_t fan_in) {
    return kernels::LaunchFillRandomBf16({const_cast<uint16_t*>(p), n, ++k * 0x2545f4914f6cdd1dull,
                                         1.0f / std::sqrt(static_cast<float>(fan_in))}, st);
  };
  auto ones = [&](const float* p, int64_t n) { return kernels::LaunchFillF32({const_cast<float*>(p), n, 1.0f}, st); };
  if (absl::Status s = rnd(embedding, c.vocab_size * h, 1); !s.ok()) return s;
  if (!c.tie_embeddings) {
    if (absl::Status s = rnd(lm_head, c.vocab_size * h, h); !s.ok()) return s;
  }
  if (absl::Status s = ones(final_norm, h); !s.ok()) return s;
  for (const LayerDevice& d : layers) {
    for (absl::Status s : {ones(d.attn_norm, h), rnd(d.wqkv, QkvWidth(c) * h, h),
                           rnd(d.wo, h * qd, qd), ones(d.mlp_norm, h), rnd(d.wgu, 2 * ffn * h, h),
                           rnd(d.wdown, h * ffn, ffn)}) {
      if (!s.ok()) return s;
    }
    if (d.q_norm != nullptr) {
      if (absl::Status s = ones(d.q_norm, 2 * c.head_dim); !s.ok()) return s;
    }
    if (d.bqkv != nullptr) {  // a QKV bias of zero
      if (absl::Status s = kernels::LaunchFillF32({const_cast<float*>(d.bqkv), QkvWidth(c), 0.0f}, st); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::model::cuda_internal
