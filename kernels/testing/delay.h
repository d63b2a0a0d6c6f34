// A kernel that only waits: tests enqueue it on a stream to slow that stream on purpose,
// so a missing cross-stream fence shows up as a wrong result instead of a lucky one.
#ifndef STRATA_KERNELS_TESTING_DELAY_H_
#define STRATA_KERNELS_TESTING_DELAY_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::testing {

// Enqueues on `stream` one thread that spins for `microseconds` of GPU time.
cudaError_t LaunchDelay(cudaStream_t stream, int64_t microseconds);

}  // namespace strata::kernels::testing

#endif  // STRATA_KERNELS_TESTING_DELAY_H_
