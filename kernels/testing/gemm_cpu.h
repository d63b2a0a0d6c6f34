// CPU twin, for tests only, of kernels/gemm/gemm.h's LaunchMatMulBf16.
#ifndef STRATA_KERNELS_TESTING_GEMM_CPU_H_
#define STRATA_KERNELS_TESTING_GEMM_CPU_H_

#include <cstdint>

namespace strata::kernels {

// out = x w^T on the widened operands: widens x and w to fp32 and calls MatMulWT (no bias).
void MatMulBf16(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_TESTING_GEMM_CPU_H_
