#include "kernels/testing/gemm_cpu.h"

#include <cstddef>
#include <vector>

#include "kernels/elementwise/bf16.h"
#include "kernels/gemm/gemm_cpu.h"

namespace strata::kernels {

void MatMulBf16(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim) {
  std::vector<float> xf(static_cast<size_t>(rows) * in_dim), wf(static_cast<size_t>(out_dim) * in_dim);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = Bf16ToFloat(x[i]);
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = Bf16ToFloat(w[i]);
  MatMulWT(xf.data(), wf.data(), nullptr, out, rows, in_dim, out_dim);
}

}  // namespace strata::kernels
