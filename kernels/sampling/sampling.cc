#include "kernels/sampling/sampling.h"

#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/sampling/sampling_launch.h"
#endif

namespace strata::kernels {

using internal::CheckSizes;

#if defined(STRATA_WITH_CUDA)

absl::Status LaunchArgmax(const ArgmaxParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.vocab); !s.ok()) return s;
  if (p.rows == 0) return absl::OkStatus();
  if (p.vocab == 0) return absl::InvalidArgumentError("argmax over an empty vocabulary");
  STRATA_CUDA_RETURN_IF_ERROR(internal::ArgmaxAsync(p.logits, p.rows, p.vocab, p.ids, stream));
  return absl::OkStatus();
}

absl::Status LaunchSample(const SampleParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.vocab); !s.ok()) return s;
  if (p.rows == 0) return absl::OkStatus();
  if (p.vocab == 0) return absl::InvalidArgumentError("sampling from an empty vocabulary");
  STRATA_CUDA_RETURN_IF_ERROR(
      internal::SampleAsync(p.logits, p.rows, p.vocab, p.temperature, p.top_p, p.u, p.ids, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

absl::Status LaunchArgmax(const ArgmaxParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchSample(const SampleParams&, cudaStream_t) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
