// A kernel that only waits: tests enqueue it on a stream to slow that stream on purpose,
// so a missing cross-stream fence shows up as a wrong result instead of a lucky one.
#ifndef STRATA_KERNELS_TESTING_DELAY_H_
#define STRATA_KERNELS_TESTING_DELAY_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::testing {

// Enqueues on `stream` one thread that spins for `microseconds` of GPU time.
cudaError_t LaunchDelay(cudaStream_t stream, int64_t microseconds);

// For the check of programmatic dependent launch (kernels/dependent_launch.cuh): one thread
// that allows its dependent at once, spins for `microseconds`, then writes `value` to *cell;
// and one that copies *from to *to, launched as a programmatic dependent of the stream's
// previous kernel when `dependent` is set.
cudaError_t LaunchDelayThenWrite(cudaStream_t stream, int64_t microseconds, int* cell, int value);
cudaError_t LaunchCopyInt(cudaStream_t stream, const int* from, int* to, bool dependent);

}  // namespace strata::kernels::testing

#endif  // STRATA_KERNELS_TESTING_DELAY_H_
