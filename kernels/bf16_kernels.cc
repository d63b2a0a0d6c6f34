#include "kernels/bf16_kernels.h"

#include <cstring>
#include <vector>

#include "kernels/cpu_kernels.h"

namespace strata::kernels {

void EmbedBf16(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out) {
  for (int r = 0; r < rows; ++r) {
    const uint16_t* row = table + int64_t{ids[r]} * dim;
    for (int i = 0; i < dim; ++i) out[int64_t{r} * dim + i] = Bf16ToFloat(row[i]);
  }
}

void RmsNormToBf16(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim, float eps) {
  std::vector<float> normed(static_cast<size_t>(dim));
  for (int r = 0; r < rows; ++r) {
    float* xr = x + int64_t{r} * dim;
    if (add != nullptr) {
      for (int i = 0; i < dim; ++i) xr[i] += add[int64_t{r} * dim + i];
    }
    RmsNorm(xr, weight, normed.data(), 1, dim, eps);
    for (int i = 0; i < dim; ++i) y[int64_t{r} * dim + i] = FloatToBf16(normed[i]);
  }
}

void SwiGluToBf16(const float* gate_up, uint16_t* out, int rows, int ffn) {
  std::vector<float> act(static_cast<size_t>(ffn));
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + int64_t{r} * 2 * ffn;
    SwiGlu(g, g + ffn, act.data(), ffn);
    for (int i = 0; i < ffn; ++i) out[int64_t{r} * ffn + i] = FloatToBf16(act[i]);
  }
}

void ToBf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(x[i]);
}

namespace {

// Writes one token's raw K and V (fp32, bias applied) into the three planes at `slot`.
void PlaceRow(const float* k, const float* v, int32_t position, int64_t slot, int kv_heads, int head_dim,
              const float* inv_freq, uint16_t* k_rot, uint16_t* k_raw, uint16_t* v_plane) {
  const int kvd = kv_heads * head_dim;
  std::vector<float> rounded(static_cast<size_t>(kvd));
  for (int j = 0; j < kvd; ++j) {
    const uint16_t raw = FloatToBf16(k[j]);
    k_raw[slot * kvd + j] = raw;
    rounded[j] = Bf16ToFloat(raw);
    v_plane[slot * kvd + j] = FloatToBf16(v[j]);
  }
  ApplyRope(rounded.data(), &position, 1, kv_heads, head_dim, inv_freq);
  for (int j = 0; j < kvd; ++j) k_rot[slot * kvd + j] = FloatToBf16(rounded[j]);
}

}  // namespace

void QkvRopePlace(const QkvPlaceParams& p) {
  const int qd = p.num_heads * p.head_dim, kvd = p.kv_heads * p.head_dim, width = qd + 2 * kvd;
  std::vector<float> row(static_cast<size_t>(width));
  for (int r = 0; r < p.rows; ++r) {
    for (int j = 0; j < width; ++j) row[j] = p.qkv[int64_t{r} * width + j] + (p.bias ? p.bias[j] : 0.0f);
    float* q = p.q_out + int64_t{r} * qd;
    std::memcpy(q, row.data(), sizeof(float) * qd);
    ApplyRope(q, &p.positions[r], 1, p.num_heads, p.head_dim, p.inv_freq);
    PlaceRow(row.data() + qd, row.data() + qd + kvd, p.positions[r], p.slots[r], p.kv_heads, p.head_dim, p.inv_freq,
             p.k_rot, p.k_raw, p.v);
  }
}

void PlaceStoredKv(const uint16_t* stored, const StoredKvParams& p) {
  const int kvd = p.kv_heads * p.head_dim;
  std::vector<float> k(static_cast<size_t>(kvd)), v(static_cast<size_t>(kvd));
  for (int l = 0; l < p.layers; ++l) {
    const int64_t plane = l * p.layer_stride;
    for (int i = 0; i < p.n; ++i) {
      const uint16_t* ks = stored + ((int64_t{l} * 2 + 0) * p.chunk_tokens + i) * kvd;
      const uint16_t* vs = stored + ((int64_t{l} * 2 + 1) * p.chunk_tokens + i) * kvd;
      for (int j = 0; j < kvd; ++j) {
        k[j] = Bf16ToFloat(ks[j]);
        v[j] = Bf16ToFloat(vs[j]);
      }
      PlaceRow(k.data(), v.data(), p.positions[i], p.slots[i], p.kv_heads, p.head_dim, p.inv_freq, p.k_rot + plane,
               p.k_raw + plane, p.v + plane);
    }
  }
}

void GatherStoredKv(const StoredKvParams& p, uint16_t* stored) {
  const int kvd = p.kv_heads * p.head_dim;
  for (int l = 0; l < p.layers; ++l) {
    const int64_t plane = l * p.layer_stride;
    for (int i = 0; i < p.n; ++i) {
      std::memcpy(stored + ((int64_t{l} * 2 + 0) * p.chunk_tokens + i) * kvd, p.k_raw + plane + p.slots[i] * kvd,
                  sizeof(uint16_t) * kvd);
      std::memcpy(stored + ((int64_t{l} * 2 + 1) * p.chunk_tokens + i) * kvd, p.v + plane + p.slots[i] * kvd,
                  sizeof(uint16_t) * kvd);
    }
  }
}

void GatherRowsBf16(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out) {
  for (int j = 0; j < n; ++j) std::memcpy(out + int64_t{j} * dim, in + int64_t{rows[j]} * dim, sizeof(uint16_t) * dim);
}

}  // namespace strata::kernels
