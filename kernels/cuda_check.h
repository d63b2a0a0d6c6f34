// The one way strata turns a CUDA runtime return code into an absl::Status, and what the
// host side of the kernels asks of the current device.
#ifndef STRATA_KERNELS_CUDA_CHECK_H_
#define STRATA_KERNELS_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace strata::kernels {

// Returns OK for cudaSuccess; otherwise an InternalError whose message names the call, where
// it was made and the CUDA error, e.g.
//   "kernels/norm/norm.cc:40: cudaMemcpyAsync(...) failed: cudaErrorInvalidValue (invalid
//   argument)".
// Thread-safe.
absl::Status CudaStatus(cudaError_t error, const char* call, const char* file, int line);

// The current device's multiprocessor count, for sizing grids (132, an H100 SXM's, when it
// cannot be read: the launch that follows reports the error). Thread-safe.
int CurrentDeviceSmCount();

// The current device's compute capability as major * 10 + minor (90: Hopper, whose wgmma
// and programmatic dependent launch the kernels take); 0 when it cannot be read. Like the
// SM count, asked of the runtime at each call (it keeps the attributes). Thread-safe.
int CurrentDeviceComputeCapability();

// The current device's peak memory bandwidth in bytes per second (twice the memory clock
// times the bus width: 3.35e12 on an H100 SXM, 4.8e12 on an H200), for rules that depend on
// how fast the KV streams against the SMs' arithmetic; 0 when it cannot be read. Read from
// the runtime once per device (the memory clock's attribute is slow to ask). Thread-safe.
double CurrentDevicePeakMemoryBandwidth();

}  // namespace strata::kernels

// Evaluates expr (a cudaError_t) once; if it is not cudaSuccess, returns the CudaStatus of
// it from the enclosing function, which must return absl::Status (or absl::StatusOr<T>).
#define STRATA_CUDA_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                     \
    const cudaError_t strata_cuda_error_ = (expr);                                         \
    if (strata_cuda_error_ != cudaSuccess) {                                               \
      return ::strata::kernels::CudaStatus(strata_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                                      \
  } while (false)

#endif  // STRATA_KERNELS_CUDA_CHECK_H_
