#include "kernels/norm/norm_cpu.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu_dot.h"

namespace strata::kernels {

using internal::Dot;

void RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    float* yr = y + static_cast<int64_t>(r) * dim;
    const float mean = Dot(xr, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * weight[i];
  }
}

}  // namespace strata::kernels
