// CPU twins, for tests only, of the fused norms in kernels/norm/norm.h (RmsNorm itself is
// kernels/norm/norm_cpu.h). Preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_TESTING_NORM_CPU_H_
#define STRATA_KERNELS_TESTING_NORM_CPU_H_

#include <cstdint>

namespace strata::kernels {

// The residual add fused with the next RmsNorm: residual += x (elementwise, [rows][dim]),
// then y = RmsNorm(residual). y may alias x; neither may alias residual.
void AddRmsNorm(const float* x, float* residual, const float* weight, float* y, int rows, int dim, float eps);

// y = bf16(RmsNorm(x)) (RmsNorm as norm/norm_cpu.h). With `add` non-null, first
// x += add (x is then the updated residual stream). x, add: [rows][dim] fp32.
void RmsNormToBf16(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim, float eps);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_TESTING_NORM_CPU_H_
