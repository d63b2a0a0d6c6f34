#include "kernels/cuda_check.h"

#include "absl/strings/str_cat.h"

namespace strata::kernels {

absl::Status CudaStatus(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call,
                                          " failed: ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

}  // namespace strata::kernels
