// Raw launches of the kernels in elementwise.cu, for elementwise.cc only. Kept free of Abseil
// so nvcc never parses it: each returns the launch's cudaError_t and expects arguments
// already validated.
#ifndef STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_LAUNCH_H_
#define STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::internal {

cudaError_t SwiGluAsync(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
cudaError_t EmbedAsync(const float* table, const int32_t* ids, int rows, int dim, float* out, cudaStream_t stream);
cudaError_t EmbedBf16Async(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out,
                           cudaStream_t stream);
cudaError_t SwiGluToBf16Async(const float* gate_up, uint16_t* out, int rows, int ffn, cudaStream_t stream);
cudaError_t ToBf16Async(const float* x, uint16_t* out, int64_t n, cudaStream_t stream);
cudaError_t GatherRowsBf16Async(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out,
                                cudaStream_t stream);
cudaError_t FillRandomBf16Async(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
cudaError_t FillF32Async(float* out, int64_t n, float value, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_LAUNCH_H_
