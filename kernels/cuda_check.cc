#include "kernels/cuda_check.h"

#include "absl/strings/str_cat.h"

namespace strata::kernels {

absl::Status CudaStatus(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call,
                                          " failed: ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

int CurrentDeviceSmCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    (void)cudaGetLastError();
    return 132;
  }
  return sms;
}

int CurrentDeviceComputeCapability() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the next launch's check
    return 0;
  }
  return major * 10 + minor;
}

}  // namespace strata::kernels
