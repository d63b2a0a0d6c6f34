#include "kernels/elementwise/elementwise_cpu.h"

#include <cstddef>
#include <cmath>
#include <cstring>

namespace strata::kernels {

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void Embed(const float* table, const int32_t* ids, int rows, int dim, float* out) {
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  for (int r = 0; r < rows; ++r) {
    std::memcpy(out + static_cast<int64_t>(r) * dim, table + static_cast<int64_t>(ids[r]) * dim,
                row_bytes);
  }
}

}  // namespace strata::kernels
