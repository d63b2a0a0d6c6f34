#include "kernels/attention/attention_cpu.h"

#include <cstddef>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu_dot.h"
#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {

using internal::Dot;
using internal::DotTile;
using internal::Lanes8x2;
using internal::LoadV;
using internal::V8;

// One (query, head) of Attention: see the header for the operation sequence. scores has room
// for n_keys floats, acc for head_dim. kHeadDim > 0 fixes head_dim at compile time so that
// the value accumulator stays in registers; 0 takes it from head_dim.
template <int kHeadDim>
STRATA_INLINE void AttendOne(const float* q, const float* k, const float* v, int64_t stride,
                             int n_keys, int head_dim, float scale, float* scores, float* acc,
                             float* out, float* lse) {
  if constexpr (kHeadDim > 0) head_dim = kHeadDim;
  int t = 0;
  // Four keys at a time share the loads of q; each score is still its own 1x1 dot.
  for (; t + 4 <= n_keys; t += 4) {
    const float* ks[4] = {k + t * stride, k + (t + 1) * stride, k + (t + 2) * stride,
                          k + (t + 3) * stride};
    DotTile<Lanes8x2, 1, 4>(&q, ks, head_dim, scores + t);
  }
  for (; t < n_keys; ++t) scores[t] = Dot(q, k + t * stride, head_dim);
  float m = -std::numeric_limits<float>::infinity();
  for (t = 0; t < n_keys; ++t) {
    scores[t] *= scale;
    m = std::max(m, scores[t]);
  }
  float sum = 0;
  for (t = 0; t < n_keys; ++t) {
    scores[t] = std::exp(scores[t] - m);
    sum += scores[t];
  }
  if constexpr (kHeadDim > 0) {
    V8 a[kHeadDim / 8] = {};
    for (t = 0; t < n_keys; ++t) {
      const float s = scores[t];
      const V8 e = {s, s, s, s, s, s, s, s};
      const float* vt = v + t * stride;
#pragma GCC unroll 16
      for (int d = 0; d < kHeadDim / 8; ++d) a[d] += e * LoadV<V8>(vt + 8 * d);
    }
    std::memcpy(acc, a, sizeof(a));
  } else {
    std::fill(acc, acc + head_dim, 0.0f);
    for (t = 0; t < n_keys; ++t) {
      const float e = scores[t];
      const float* vt = v + t * stride;
      for (int d = 0; d < head_dim; ++d) acc[d] += e * vt[d];
    }
  }
  for (int d = 0; d < head_dim; ++d) out[d] = acc[d] / sum;
  if (lse != nullptr) *lse = m + std::log(sum);
}

// Attention for queries [0, p.num_queries); scratch holds the scores and the accumulator.
template <int kHeadDim>
STRATA_INLINE void AttentionQueries(const AttentionParams& p, float* scores, float* acc) {
  const int group = p.num_heads / p.num_kv_heads;
  for (int i = 0; i < p.num_queries; ++i) {
    const int n_keys = p.shared_keys > 0 ? p.shared_keys : p.first_query_pos + i + 1;
    for (int h = 0; h < p.num_heads; ++h) {
      const int64_t qo = (static_cast<int64_t>(i) * p.num_heads + h) * p.head_dim;
      const int64_t kvo = static_cast<int64_t>(h / group) * p.head_dim;
      float* lse = p.lse != nullptr ? p.lse + static_cast<int64_t>(i) * p.num_heads + h : nullptr;
      AttendOne<kHeadDim>(p.q + qo, p.k + kvo, p.v + kvo, p.kv_row_stride, n_keys, p.head_dim,
                          p.scale, scores, acc, p.out + qo, lse);
    }
  }
}

// The head dims the device kernels take get a compile-time head_dim (dispatch.h); any other
// runs the generic loop.
STRATA_MULTIVERSIONED void AttentionImpl(const AttentionParams& p, float* scores, float* acc) {
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, kHeadDim, { return AttentionQueries<kHeadDim>(p, scores, acc); })
  return AttentionQueries<0>(p, scores, acc);
}

}  // namespace

void Attention(const AttentionParams& p) {
  if (p.num_queries <= 0) return;
  const size_t keys = p.shared_keys > 0 ? static_cast<size_t>(p.shared_keys)
                                        : static_cast<size_t>(p.first_query_pos) + p.num_queries;
  std::vector<float> scratch(keys + p.head_dim);
  AttentionImpl(p, scratch.data(), scratch.data() + keys);
}

}  // namespace strata::kernels
