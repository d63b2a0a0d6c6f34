// Raw launches of the kernels in sampling.cu, for sampling.cc only. Kept free of Abseil so nvcc
// never parses it: each returns the launch's cudaError_t and expects arguments already
// validated.
#ifndef STRATA_KERNELS_SAMPLING_SAMPLING_LAUNCH_H_
#define STRATA_KERNELS_SAMPLING_SAMPLING_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::internal {

cudaError_t ArgmaxAsync(const float* logits, int rows, int vocab, int32_t* ids, cudaStream_t stream);
cudaError_t SampleAsync(const float* logits, int rows, int vocab, const float* temperature, const float* top_p,
                        const double* u, int32_t* ids, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_SAMPLING_SAMPLING_LAUNCH_H_
