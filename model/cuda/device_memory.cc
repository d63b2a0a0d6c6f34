#include "model/cuda/device_memory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"

namespace strata::model::cuda_internal {

absl::Status DeviceBuffer::Allocate(int64_t bytes) {
  Free();
  if (bytes <= 0) return absl::OkStatus();
  if (cudaError_t e = cudaMalloc(&ptr_, static_cast<size_t>(bytes)); e != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    if (e == cudaErrorMemoryAllocation) {
      return absl::ResourceExhaustedError(absl::StrCat("the GPU has no room for ", bytes, " more bytes"));
    }
    return kernels::CudaStatus(e, "cudaMalloc", __FILE__, __LINE__);
  }
  bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status DeviceBuffer::Reserve(int64_t bytes, int64_t* generation) {
  if (bytes <= bytes_) return absl::OkStatus();
  ++*generation;
  return Allocate(bytes + bytes / 4);
}

void DeviceBuffer::Free() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

absl::Status PinnedBuffer::Reserve(int64_t bytes, int64_t* generation) {
  if (bytes <= bytes_) return absl::OkStatus();
  ++*generation;
  bytes = std::max<int64_t>(bytes + bytes / 4, 4096);
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  if (cudaError_t e = cudaMallocHost(&ptr_, static_cast<size_t>(bytes)); e != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();  // not left for the next launch's check to report
    return kernels::CudaStatus(e, "cudaMallocHost", __FILE__, __LINE__);
  }
  bytes_ = bytes;
  return absl::OkStatus();
}

}  // namespace strata::model::cuda_internal
