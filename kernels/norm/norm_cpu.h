// CPU RMSNorm, the specification of norm/norm.h's device kernels and what the CPU engine
// runs. Determinism contract and preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_NORM_NORM_CPU_H_
#define STRATA_KERNELS_NORM_NORM_CPU_H_

namespace strata::kernels {

// Root-mean-square layer norm of each row:
//   y[r][i] = (x[r][i] * (1 / sqrt(mean_i(x[r][i]^2) + eps))) * weight[i]
// x and y are [rows][dim]; weight is [dim]. x and y may be the same buffer.
void RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_NORM_NORM_CPU_H_
