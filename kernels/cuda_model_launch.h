// Raw launches of the kernels in cuda_model_kernels.cu, for cuda_model_kernels.cc only
// (kept free of Abseil so nvcc never parses it). Arguments are validated by the caller.
#ifndef STRATA_KERNELS_CUDA_MODEL_LAUNCH_H_
#define STRATA_KERNELS_CUDA_MODEL_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/bf16_kernels.h"

namespace strata::kernels::internal {

cudaError_t EmbedBf16Async(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out,
                           cudaStream_t stream);
cudaError_t RmsNormToBf16Async(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim,
                               float eps, cudaStream_t stream);
cudaError_t SwiGluToBf16Async(const float* gate_up, uint16_t* out, int rows, int ffn, cudaStream_t stream);
cudaError_t ToBf16Async(const float* x, uint16_t* out, int64_t n, cudaStream_t stream);
cudaError_t QkvRopePlaceAsync(const QkvPlaceParams& p, cudaStream_t stream);
cudaError_t PlaceStoredKvAsync(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream);
cudaError_t GatherStoredKvAsync(const StoredKvParams& p, uint16_t* stored, cudaStream_t stream);
cudaError_t GatherRowsBf16Async(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out,
                                cudaStream_t stream);
cudaError_t FillRandomBf16Async(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
cudaError_t SampleAsync(const float* logits, int rows, int vocab, const float* temperature, const float* top_p,
                        const double* u, int32_t* ids, cudaStream_t stream);
cudaError_t FillF32Async(float* out, int64_t n, float value, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_CUDA_MODEL_LAUNCH_H_
