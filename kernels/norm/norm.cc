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
absl::Status LaunchRmsNormToBf16(const RmsNormToBf16Params&, cudaStream_t) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
