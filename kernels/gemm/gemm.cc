#include "kernels/gemm/gemm.h"

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/gemm/skinny_launch.h"
#endif
#if defined(STRATA_WITH_CUBLAS)
#include <cublas_v2.h>
#include <dlfcn.h>
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUBLAS)

namespace {

// cuBLAS is loaded with dlopen when the first product runs, not linked: cuBLASLt holds
// ~94 KB of static TLS, and a library linked at start puts its TLS in every thread's
// stack, so threads made with small stacks (Debian's civetweb, which serves /metrics,
// asks for 100 KB) fail to start with EINVAL. Loaded later, the TLS is allocated per
// thread on demand instead.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // cublasGemmEx is overloaded in C++: the C signature, spelled out.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string error;
};

const Cublas& LoadCublas() {
  static const Cublas* cublas = [] {
    auto* c = new Cublas();
    void* lib = nullptr;
    for (const char* name : {"libcublas.so." STRATA_CUBLAS_SOVERSION, "libcublas.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      const char* why = dlerror();
      c->error = absl::StrCat("cannot load cuBLAS (libcublas.so." STRATA_CUBLAS_SOVERSION "): ", why ? why : "?");
      return c;
    }
    c->create = reinterpret_cast<decltype(c->create)>(dlsym(lib, "cublasCreate_v2"));
    c->set_stream = reinterpret_cast<decltype(c->set_stream)>(dlsym(lib, "cublasSetStream_v2"));
    c->gemm_ex = reinterpret_cast<decltype(c->gemm_ex)>(dlsym(lib, "cublasGemmEx"));
    c->status_string = reinterpret_cast<decltype(c->status_string)>(dlsym(lib, "cublasGetStatusString"));
    if (!c->create || !c->set_stream || !c->gemm_ex || !c->status_string) {
      c->error = "the cuBLAS library lacks cublasCreate_v2, cublasSetStream_v2, cublasGemmEx or cublasGetStatusString";
    }
    return c;
  }();
  return *cublas;
}

// One handle per thread (cuBLAS handles are not meant to be shared across threads).
absl::StatusOr<cublasHandle_t> ThreadHandle() {
  const Cublas& cublas = LoadCublas();
  if (!cublas.error.empty()) return absl::FailedPreconditionError(cublas.error);
  thread_local cublasHandle_t handle = nullptr;
  if (handle == nullptr) {
    const cublasStatus_t created = cublas.create(&handle);
    if (created != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      return absl::InternalError(absl::StrCat("cublasCreate: ", cublas.status_string(created)));
    }
  }
  return handle;
}

absl::Status CublasMatMulBf16(const MatMulBf16Params& p, cudaStream_t stream) {
  const uint16_t* x = p.x;
  const uint16_t* w = p.w;
  float* out = p.out;
  const int rows = p.rows, in_dim = p.in_dim, out_dim = p.out_dim;
  auto handle = ThreadHandle();
  if (!handle.ok()) return handle.status();
  const Cublas& cublas = LoadCublas();
  if (cublasStatus_t s = cublas.set_stream(*handle, stream); s != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasSetStream: ", cublas.status_string(s)));
  }
  // Row-major out[rows][out] is column-major (out x rows): out = W^T(col) * X(col), where
  // row-major w[out][in] is column-major (in x out) and x[rows][in] is (in x rows).
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s = cublas.gemm_ex(*handle, CUBLAS_OP_T, CUBLAS_OP_N, out_dim, rows, in_dim, &one, w, CUDA_R_16BF,
                                  in_dim, x, CUDA_R_16BF, in_dim, &zero, out, CUDA_R_32F, out_dim,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasGemmEx (bf16, ", rows, "x", in_dim, "x", out_dim,
                                            "): ", cublas.status_string(s)));
  }
  return absl::OkStatus();
}

}  // namespace

#elif defined(STRATA_WITH_CUDA)

namespace {

absl::Status CublasMatMulBf16(const MatMulBf16Params&, cudaStream_t) {
  return absl::UnimplementedError("strata was built without cuBLAS");
}

}  // namespace

#endif

absl::Status LaunchMatMulBf16(const MatMulBf16Params& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.in_dim <= 0 || p.out_dim <= 0) {
    return absl::InvalidArgumentError("MatMulBf16 needs positive sizes");
  }
#if defined(STRATA_WITH_CUDA)
  const bool fits = internal::SkinnyMatMulFits(p.x, p.w, p.rows, p.in_dim, p.out_dim);
  if (p.path == MatMulPath::kSkinny && !fits) {
    return absl::InvalidArgumentError(absl::StrCat("the skinny product takes 1..", internal::kSkinnyMaxRows,
                                                   " rows, in_dim a multiple of 32, out_dim of 16 and aligned "
                                                   "operands, not ",
                                                   p.rows, "x", p.in_dim, "x", p.out_dim));
  }
  if (p.path != MatMulPath::kCublas && fits) {
    STRATA_CUDA_RETURN_IF_ERROR(
        internal::SkinnyMatMulAsync(p.x, p.w, p.out, p.rows, p.in_dim, p.out_dim, stream));
    return absl::OkStatus();
  }
  return CublasMatMulBf16(p, stream);
#else
  (void)stream;
  return absl::UnimplementedError("strata was built without CUDA");
#endif
}

}  // namespace strata::kernels
