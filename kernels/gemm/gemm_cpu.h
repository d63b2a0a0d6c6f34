// The CPU linear layer (the specification of gemm/gemm.h's LaunchMatMulBf16, and what the
// CPU engine runs). Determinism contract and preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_GEMM_GEMM_CPU_H_
#define STRATA_KERNELS_GEMM_GEMM_CPU_H_

namespace strata::kernels {

// out[r][j] = dot(x[r], w[j]) + (bias ? bias[j] : 0)
// x is [rows][in_dim], w is [out_dim][in_dim] row-major (the Hugging Face Linear layout),
// bias is [out_dim] or null, out is [rows][out_dim] and must not overlap x, w or bias.
// out[r][j] depends only on x[r], w[j] and bias[j] (see the determinism contract).
void MatMulWT(const float* x, const float* w, const float* bias, float* out, int rows, int in_dim,
              int out_dim);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_GEMM_GEMM_CPU_H_
