#include "kernels/testing/rope_cpu.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/elementwise/bf16.h"
#include "kernels/rope/rope_cpu.h"

namespace strata::kernels {

void PlaceKvPaged(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots, int n,
                  int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages, uint16_t* v_pages) {
  const int64_t row = int64_t{kv_heads} * head_dim;
  std::vector<float> k(k_raw, k_raw + n * row);
  ApplyRope(k.data(), positions, n, kv_heads, head_dim, inv_freq);
  for (int i = 0; i < n; ++i) {
    for (int64_t j = 0; j < row; ++j) {
      k_pages[slots[i] * row + j] = FloatToBf16(k[i * row + j]);
      v_pages[slots[i] * row + j] = FloatToBf16(v[i * row + j]);
    }
  }
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
      const int64_t block = p.stored_block_stride != 0 ? p.stored_block_stride : int64_t{2} * p.chunk_tokens * kvd;
      const uint16_t* ks = stored + l * block + int64_t{i} * kvd;
      const uint16_t* vs = stored + l * block + (int64_t{p.chunk_tokens} + i) * kvd;
      for (int j = 0; j < kvd; ++j) {
        k[j] = Bf16ToFloat(ks[j]);
        v[j] = Bf16ToFloat(vs[j]);
      }
      const int64_t index = int64_t{l} * p.index_stride + i;
      if (p.slots[index] < 0) continue;
      PlaceRow(k.data(), v.data(), p.positions[index], p.slots[index], p.kv_heads, p.head_dim, p.inv_freq,
               p.k_rot + plane, p.k_raw + plane, p.v + plane);
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

}  // namespace strata::kernels
