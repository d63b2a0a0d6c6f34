#include "kernels/attention/merge_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace strata::kernels {

void MergeAttentionStates(const float* o1, const float* lse1, const float* o2, const float* lse2,
                          float* o, float* lse, int rows, int heads, int head_dim) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t n = static_cast<int64_t>(rows) * heads;
  for (int64_t s = 0; s < n; ++s) {
    const float l1 = lse1[s], l2 = lse2[s];
    const int64_t base = s * head_dim;
    if (l1 == kNegInf && l2 == kNegInf) {
      std::fill(o + base, o + base + head_dim, 0.0f);
      lse[s] = kNegInf;
      continue;
    }
    const float m = std::max(l1, l2);
    const float a1 = std::exp(l1 - m), a2 = std::exp(l2 - m);
    const float denom = a1 + a2;
    for (int d = 0; d < head_dim; ++d) {
      o[base + d] = (o1[base + d] * a1 + o2[base + d] * a2) / denom;
    }
    lse[s] = m + std::log(denom);
  }
}

}  // namespace strata::kernels
