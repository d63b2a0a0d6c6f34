// Raw launch of the skinny product in skinny.cu (a decode step's linear layers: a few rows
// times a large weight matrix), for gemm.cc and the GEMM benchmark only. Kept free of
// Abseil so nvcc never parses it; returns the launch's cudaError_t and expects arguments
// already validated (SkinnyMatMulFits).
#ifndef STRATA_KERNELS_GEMM_SKINNY_LAUNCH_H_
#define STRATA_KERNELS_GEMM_SKINNY_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/alignment.h"
namespace strata::kernels::internal {

// The most rows one skinny product takes (two 8-column MMA fragments).
inline constexpr int kSkinnyMaxRows = 16;

// Whether the skinny kernel takes the shape: 1..kSkinnyMaxRows rows, in_dim a multiple of
// 32, out_dim of 16, and x and w 16-byte aligned.
inline bool SkinnyMatMulFits(const void* x, const void* w, int rows, int in_dim, int out_dim) {
  return rows >= 1 && rows <= kSkinnyMaxRows && in_dim > 0 && in_dim % 32 == 0 && out_dim > 0 &&
         out_dim % 16 == 0 && IsAligned(x, 16) && IsAligned(w, 16);
}

// out[r][o] = sum_i x[r][i] * w[o][i] (bf16 operands, fp32 accumulation), as
// LaunchMatMulBf16 (gemm.h).
cudaError_t SkinnyMatMulAsync(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim,
                              cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_GEMM_SKINNY_LAUNCH_H_
