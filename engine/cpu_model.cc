#include "engine/cpu_model.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu_kernels.h"

namespace strata::engine {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

CpuModel::CpuModel(ModelWeights weights)
    : weights_(std::move(weights)),
      inv_freq_(kernels::RopeInvFreq(weights_.config().head_dim, weights_.config().rope_theta,
                                     weights_.config().rope_scaling)) {}

void CpuModel::PlaceLoadedKv(SequenceKv& kv, int layer, int64_t pos, const float* k_raw,
                             const float* v) const {
  const ModelConfig& c = config();
  const size_t bytes = static_cast<size_t>(c.kv_dim()) * sizeof(float);
  std::memcpy(kv.k_raw(layer, pos), k_raw, bytes);
  std::memcpy(kv.v(layer, pos), v, bytes);
  float* k = kv.k_rot(layer, pos);
  std::memcpy(k, k_raw, bytes);
  const int32_t p = static_cast<int32_t>(pos);
  kernels::ApplyRope(k, &p, 1, c.num_kv_heads, c.head_dim, inv_freq_.data());
}

void CpuModel::Forward(absl::Span<const ForwardEntry> batch) {
  const ModelConfig& c = config();
  const int hidden = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  int64_t rows = 0;
  for (const ForwardEntry& e : batch) rows += static_cast<int64_t>(e.tokens.size());
  if (rows == 0) return;
  Grow(x_, rows * hidden);
  Grow(h_, rows * hidden);
  Grow(q_, rows * qd);
  Grow(k_, rows * kvd);
  Grow(v_, rows * kvd);
  Grow(attn_, rows * qd);
  Grow(proj_, rows * hidden);
  Grow(gate_, rows * ffn);
  Grow(up_, rows * ffn);
  positions_.clear();
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(rows));
  for (const ForwardEntry& e : batch) {
    for (size_t i = 0; i < e.tokens.size(); ++i) {
      ids.push_back(e.tokens[i]);
      positions_.push_back(static_cast<int32_t>(e.start_pos + static_cast<int64_t>(i)));
    }
  }
  const int r = static_cast<int>(rows);
  float* x = x_.data();
  kernels::Embed(weights_.embedding(), ids.data(), r, hidden, x);

  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights_.layer(l);
    // Attention block.
    kernels::RmsNorm(x, w.attn_norm, h_.data(), r, hidden, c.rms_norm_eps);
    kernels::MatMulWT(h_.data(), w.wq, w.bq, q_.data(), r, hidden, qd);
    kernels::MatMulWT(h_.data(), w.wk, w.bk, k_.data(), r, hidden, kvd);
    kernels::MatMulWT(h_.data(), w.wv, w.bv, v_.data(), r, hidden, kvd);
    // K before RoPE is what the session cache keeps; then rotate q and k in place.
    int64_t row = 0;
    for (const ForwardEntry& e : batch) {
      for (size_t i = 0; i < e.tokens.size(); ++i, ++row) {
        int64_t pos = e.start_pos + static_cast<int64_t>(i);
        std::memcpy(e.kv->k_raw(l, pos), k_.data() + row * kvd, kvd * sizeof(float));
        std::memcpy(e.kv->v(l, pos), v_.data() + row * kvd, kvd * sizeof(float));
      }
    }
    kernels::ApplyRope(q_.data(), positions_.data(), r, c.num_heads, c.head_dim, inv_freq_.data());
    kernels::ApplyRope(k_.data(), positions_.data(), r, c.num_kv_heads, c.head_dim, inv_freq_.data());
    row = 0;
    for (const ForwardEntry& e : batch) {
      const int n = static_cast<int>(e.tokens.size());
      for (int i = 0; i < n; ++i) {
        std::memcpy(e.kv->k_rot(l, e.start_pos + i), k_.data() + (row + i) * kvd, kvd * sizeof(float));
      }
      kernels::AttentionParams p{};
      p.q = q_.data() + row * qd;
      p.k = e.kv->k_rot(l, 0);
      p.v = e.kv->v(l, 0);
      p.out = attn_.data() + row * qd;
      p.lse = nullptr;
      p.num_queries = n;
      p.num_heads = c.num_heads;
      p.num_kv_heads = c.num_kv_heads;
      p.head_dim = c.head_dim;
      p.kv_row_stride = kvd;
      p.first_query_pos = static_cast<int>(e.start_pos);
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      kernels::Attention(p);
      row += n;
    }
    kernels::MatMulWT(attn_.data(), w.wo, nullptr, proj_.data(), r, qd, hidden);
    AddInPlace(x, proj_.data(), rows * hidden);
    // MLP block.
    kernels::RmsNorm(x, w.mlp_norm, h_.data(), r, hidden, c.rms_norm_eps);
    kernels::MatMulWT(h_.data(), w.w_gate, nullptr, gate_.data(), r, hidden, ffn);
    kernels::MatMulWT(h_.data(), w.w_up, nullptr, up_.data(), r, hidden, ffn);
    kernels::SwiGlu(gate_.data(), up_.data(), gate_.data(), rows * ffn);
    kernels::MatMulWT(gate_.data(), w.w_down, nullptr, proj_.data(), r, ffn, hidden);
    AddInPlace(x, proj_.data(), rows * hidden);
  }

  // Logits only for the rows that need them (the last token of an entry).
  int64_t row = 0;
  for (const ForwardEntry& e : batch) {
    row += static_cast<int64_t>(e.tokens.size());
    if (e.logits == nullptr) continue;
    float* last = h_.data();
    kernels::RmsNorm(x + (row - 1) * hidden, weights_.final_norm(), last, 1, hidden, c.rms_norm_eps);
    kernels::MatMulWT(last, weights_.lm_head(), nullptr, e.logits, 1, hidden, c.vocab_size);
  }
}

}  // namespace strata::engine
