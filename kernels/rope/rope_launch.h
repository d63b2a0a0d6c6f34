// Raw launches of the kernels in rope.cu, for rope.cc only. Kept free of Abseil so nvcc never
// parses it: each returns the launch's cudaError_t and expects arguments already validated.
#ifndef STRATA_KERNELS_ROPE_ROPE_LAUNCH_H_
#define STRATA_KERNELS_ROPE_ROPE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/rope/kv_place_params.h"

namespace strata::kernels::internal {

cudaError_t ApplyRopeAsync(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                           const float* inv_freq, cudaStream_t stream);
cudaError_t PlaceKvPagedAsync(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots,
                              int n, int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages,
                              uint16_t* v_pages, cudaStream_t stream);
cudaError_t QkvRopePlaceAsync(const QkvPlaceParams& p, cudaStream_t stream);
cudaError_t PlaceStoredKvAsync(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream);
cudaError_t GatherStoredKvAsync(const StoredKvParams& p, uint16_t* stored, int max_blocks, cudaStream_t stream);
cudaError_t GatherStoredKvChunksAsync(const StoredChunksParams& p, int max_blocks, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ROPE_ROPE_LAUNCH_H_
