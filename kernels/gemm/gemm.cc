#include "kernels/gemm/gemm.h"

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/gemm/skinny_launch.h"
#endif
#if defined(STRATA_WITH_CUBLAS)
#include "kernels/gemm/cublas.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)
static_assert(kSkinnyMatMulMaxRows == internal::kSkinnyMaxRows);
#endif

#if defined(STRATA_WITH_CUBLAS)

using internal::CublasMatMulBf16;

#elif defined(STRATA_WITH_CUDA)

namespace {

absl::Status CublasMatMulBf16(const MatMulBf16Params&, cudaStream_t) {
  return absl::UnimplementedError("strata was built without cuBLAS");
}

}  // namespace

#endif

#if !defined(STRATA_WITH_CUBLAS)
std::vector<MatMulTuning> TunedMatMuls() { return {}; }
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
