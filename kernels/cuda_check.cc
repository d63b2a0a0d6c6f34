#include "kernels/cuda_check.h"

#include <atomic>
#include <iterator>

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

double CurrentDevicePeakMemoryBandwidth() {
  // Read once per device: the memory clock's attribute is asked of the driver each time
  // (about 0.3 ms on the H200), and the decode's rule asks at every launch.
  static std::atomic<double> cache[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const bool cached = device >= 0 && device < static_cast<int>(std::size(cache));
  if (cached) {
    if (const double known = cache[device].load(std::memory_order_relaxed); known > 0) return known;
  }
  int khz = 0, bits = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const double bandwidth = 2.0 * khz * 1e3 * bits / 8;
  if (cached) cache[device].store(bandwidth, std::memory_order_relaxed);
  return bandwidth;
}

}  // namespace strata::kernels
