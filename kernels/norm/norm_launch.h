// Raw launches of the kernels in norm.cu, for norm.cc only. Kept free of Abseil so nvcc never
// parses it: each returns the launch's cudaError_t and expects arguments already validated.
#ifndef STRATA_KERNELS_NORM_NORM_LAUNCH_H_
#define STRATA_KERNELS_NORM_NORM_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::internal {

cudaError_t HeadRmsNormAsync(float* x, int rows, int64_t row_stride, int q_heads, int k_heads, int head_dim,
                            const float* q_weight, const float* k_weight, float eps, cudaStream_t stream);
cudaError_t RmsNormAsync(const float* x, const float* weight, float* y, int rows, int dim, float eps,
                         cudaStream_t stream);
cudaError_t AddRmsNormAsync(const float* x, float* residual, const float* weight, float* y, int rows, int dim,
                            float eps, cudaStream_t stream);
cudaError_t RmsNormToBf16Async(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim,
                               float eps, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_NORM_NORM_LAUNCH_H_
