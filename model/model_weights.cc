#include "model/model_weights.h"

#include <cmath>
#include <string>

#include "base/random.h"
#include "xxhash.h"

namespace strata::model {

ModelWeights::ModelWeights(const ModelConfig& config) : config_(config) {}

void ModelWeights::Layout() {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size,
                v = c.vocab_size;
  int64_t per_layer = h + q * h + 2 * kv * h + (c.qkv_bias ? q + 2 * kv : 0) + (c.qk_norm ? 2 * c.head_dim : 0) +
                      h * q + h + 3 * f * h;
  int64_t total = v * h + c.num_layers * per_layer + h + (c.tie_embeddings ? 0 : v * h);
  data_.assign(static_cast<size_t>(total), 0.0f);
  float* p = data_.data();
  auto take = [&p](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  embedding_ = take(v * h);
  layers_.resize(c.num_layers);
  for (LayerWeights& l : layers_) {
    l.attn_norm = take(h);
    l.wq = take(q * h);
    l.wk = take(kv * h);
    l.wv = take(kv * h);
    l.bq = c.qkv_bias ? take(q) : nullptr;
    l.bk = c.qkv_bias ? take(kv) : nullptr;
    l.bv = c.qkv_bias ? take(kv) : nullptr;
    l.q_norm = c.qk_norm ? take(c.head_dim) : nullptr;
    l.k_norm = c.qk_norm ? take(c.head_dim) : nullptr;
    l.wo = take(h * q);
    l.mlp_norm = take(h);
    l.w_gate = take(f * h);
    l.w_up = take(f * h);
    l.w_down = take(h * f);
  }
  final_norm_ = take(h);
  lm_head_ = c.tie_embeddings ? embedding_ : take(v * h);
}

ModelWeights ModelWeights::Random(const ModelConfig& config, uint64_t seed,
                                  const std::vector<int32_t>& silent_tokens) {
  ModelWeights w(config);
  w.Layout();
  SplitMix64 rng(seed);
  auto fill = [&rng](const float* dst, int64_t n, float scale) {
    float* d = const_cast<float*>(dst);  // views are const for users; this is the owner
    for (int64_t i = 0; i < n; ++i) d[i] = rng.Symmetric() * scale;
  };
  auto ones = [](const float* dst, int64_t n) {
    float* d = const_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = 1.0f;
  };
  const ModelConfig& c = config;
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size;
  // Uniform(-a, a) has std a/sqrt(3): a = sqrt(3/fan_in) keeps activations at unit scale.
  auto lin = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  fill(w.embedding_, c.vocab_size * h, 1.0f);
  for (const LayerWeights& l : w.layers_) {
    ones(l.attn_norm, h);
    fill(l.wq, q * h, lin(h));
    fill(l.wk, kv * h, lin(h));
    fill(l.wv, kv * h, lin(h));
    if (c.qkv_bias) {
      fill(l.bq, q, 0.1f);
      fill(l.bk, kv, 0.1f);
      fill(l.bv, kv, 0.1f);
    }
    if (c.qk_norm) {  // near one, not one: the norms' weights must matter
      fill(l.q_norm, c.head_dim, 0.2f);
      fill(l.k_norm, c.head_dim, 0.2f);
      for (const float* n : {l.q_norm, l.k_norm}) {
        for (int i = 0; i < c.head_dim; ++i) const_cast<float*>(n)[i] += 1.0f;
      }
    }
    fill(l.wo, h * q, lin(q) * 0.5f);
    ones(l.mlp_norm, h);
    fill(l.w_gate, f * h, lin(h));
    fill(l.w_up, f * h, lin(h));
    fill(l.w_down, h * f, lin(f) * 0.5f);
  }
  ones(w.final_norm_, h);
  if (!c.tie_embeddings) {
    // A sharp head (scale 4) makes greedy text vary from token to token.
    fill(w.lm_head_, c.vocab_size * h, lin(h) * 4.0f);
    for (int32_t t : silent_tokens) {
      if (t >= 0 && t < c.vocab_size) {
        float* row = const_cast<float*>(w.lm_head_) + static_cast<int64_t>(t) * h;
        for (int64_t i = 0; i < h; ++i) row[i] = 0.0f;
      }
    }
  }
  w.ComputeFingerprint();
  return w;
}

void ModelWeights::ComputeFingerprint() {
  std::string canonical = config_.CanonicalString();
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, canonical.data(), canonical.size());
  XXH3_64bits_update(st, data_.data(), data_.size() * sizeof(float));
  fingerprint_ = XXH3_64bits_digest(st);
  XXH3_freeState(st);
}

}  // namespace strata::model
