#include "kernels/norm/norm.h"

#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/norm/norm_launch.h"
#endif

namespace strata::kernels {

using internal::CheckSizes;

#if defined(STRATA_WITH_CUDA)

absl::Status LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.dim); !s.ok()) return s;
  if (p.rows == 0 || p.dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::RmsNormAsync(p.x, p.weight, p.y, p.rows, p.dim, p.eps, stream));
  return absl::OkStatus();
}

absl::Status LaunchHeadRmsNorm(const HeadRmsNormParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.head_dim); !s.ok()) return s;
  if (p.q_heads < 0 || p.k_heads < 0 || p.row_stride < int64_t{p.q_heads + p.k_heads} * p.head_dim) {
    return absl::InvalidArgumentError("head rms norm: bad head counts or row stride");
  }
  if (p.rows == 0 || p.head_dim == 0 || p.q_heads + p.k_heads == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::HeadRmsNormAsync(p.x, p.rows, p.row_stride, p.q_heads, p.k_heads, p.head_dim,
                                                         p.q_weight, p.k_weight, p.eps, stream));
  return absl::OkStatus();
}

absl::Status LaunchAddRmsNorm(const AddRmsNormParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.dim); !s.ok()) return s;
  if (p.rows == 0 || p.dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(
      internal::AddRmsNormAsync(p.x, p.residual, p.weight, p.y, p.rows, p.dim, p.eps, stream));
  return absl::OkStatus();
}

absl::Status LaunchRmsNormToBf16(const RmsNormToBf16Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.dim); !s.ok()) return s;
  if (p.rows == 0 || p.dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::RmsNormToBf16Async(p.add, p.x, p.weight, p.y, p.rows, p.dim, p.eps, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

absl::Status LaunchRmsNorm(const RmsNormParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchAddRmsNorm(const AddRmsNormParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchHeadRmsNorm(const HeadRmsNormParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchRmsNormToBf16(const RmsNormToBf16Params&, cudaStream_t) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
