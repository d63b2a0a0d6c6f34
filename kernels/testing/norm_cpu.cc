#include "kernels/testing/norm_cpu.h"

#include <cstddef>
#include <vector>

#include "kernels/elementwise/bf16.h"
#include "kernels/norm/norm_cpu.h"

namespace strata::kernels {

void AddRmsNorm(const float* x, float* residual, const float* weight, float* y, int rows, int dim, float eps) {
  const int64_t n = int64_t{rows} * dim;
  for (int64_t i = 0; i < n; ++i) residual[i] += x[i];
  RmsNorm(residual, weight, y, rows, dim, eps);
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

}  // namespace strata::kernels
