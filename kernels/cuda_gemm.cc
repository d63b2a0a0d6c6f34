#include "kernels/cuda_gemm.h"

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu_kernels.h"

#if defined(STRATA_WITH_CUBLAS)
#include <cublas_v2.h>
#endif

namespace strata::kernels {

void MatMulBf16(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim) {
  std::vector<float> xf(static_cast<size_t>(rows) * in_dim), wf(static_cast<size_t>(out_dim) * in_dim);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = Bf16ToFloat(x[i]);
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = Bf16ToFloat(w[i]);
  MatMulWT(xf.data(), wf.data(), nullptr, out, rows, in_dim, out_dim);
}

#if defined(STRATA_WITH_CUBLAS)

namespace {

// One handle per thread (cuBLAS handles are not meant to be shared across threads).
absl::StatusOr<cublasHandle_t> ThreadHandle() {
  thread_local cublasHandle_t handle = nullptr;
  thread_local cublasStatus_t created = CUBLAS_STATUS_NOT_INITIALIZED;
  if (handle == nullptr) {
    created = cublasCreate(&handle);
    if (created != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      return absl::InternalError(absl::StrCat("cublasCreate: ", cublasGetStatusString(created)));
    }
  }
  return handle;
}

}  // namespace

absl::Status LaunchMatMulBf16(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim,
                              cudaStream_t stream) {
  if (rows <= 0 || in_dim <= 0 || out_dim <= 0) return absl::InvalidArgumentError("MatMulBf16 needs positive sizes");
  auto handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  if (cublasStatus_t s = cublasSetStream(*handle, stream); s != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasSetStream: ", cublasGetStatusString(s)));
  }
  // Row-major out[rows][out] is column-major (out x rows): out = W^T(col) * X(col), where
  // row-major w[out][in] is column-major (in x out) and x[rows][in] is (in x rows).
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s = cublasGemmEx(*handle, CUBLAS_OP_T, CUBLAS_OP_N, out_dim, rows, in_dim, &one, w, CUDA_R_16BF,
                                  in_dim, x, CUDA_R_16BF, in_dim, &zero, out, CUDA_R_32F, out_dim,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasGemmEx (bf16, ", rows, "x", in_dim, "x", out_dim,
                                            "): ", cublasGetStatusString(s)));
  }
  return absl::OkStatus();
}

#else

absl::Status LaunchMatMulBf16(const uint16_t*, const uint16_t*, float*, int, int, int, cudaStream_t) {
  return absl::UnimplementedError("strata was built without cuBLAS");
}

#endif

}  // namespace strata::kernels
