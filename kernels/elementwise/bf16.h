// bf16 <-> fp32 on the CPU (bf16 stored as uint16_t): the scalar conversions every bf16 twin,
// the safetensors reader and the CUDA backend's weight upload use, and ToBf16 over a buffer
// (the twin of LaunchToBf16 in elementwise.h). The device side of the same rounding is
// Widen/Narrow in kernels/cuda_device.cuh.
#ifndef STRATA_KERNELS_ELEMENTWISE_BF16_H_
#define STRATA_KERNELS_ELEMENTWISE_BF16_H_

#include <cstdint>

namespace strata::kernels {

// bf16 <-> fp32 (bf16 stored as uint16_t): widening is exact; narrowing rounds to nearest,
// ties to even (NaN stays NaN).
float Bf16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);

// out[i] = bf16(x[i]) for i < n.
void ToBf16(const float* x, uint16_t* out, int64_t n);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ELEMENTWISE_BF16_H_
