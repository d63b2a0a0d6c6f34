#include "kernels/elementwise/elementwise.h"

#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/elementwise/elementwise_launch.h"
#endif

namespace strata::kernels {

using internal::CheckSizes;

#if defined(STRATA_WITH_CUDA)

absl::Status LaunchEmbed(const EmbedParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.dim); !s.ok()) return s;
  if (p.rows == 0 || p.dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::EmbedAsync(p.table, p.ids, p.rows, p.dim, p.out, stream));
  return absl::OkStatus();
}

absl::Status LaunchEmbedBf16(const EmbedBf16Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.dim); !s.ok()) return s;
  if (p.rows == 0 || p.dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::EmbedBf16Async(p.table, p.ids, p.rows, p.dim, p.out, stream));
  return absl::OkStatus();
}

absl::Status LaunchSwiGlu(const SwiGluParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.n); !s.ok()) return s;
  if (p.n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::SwiGluAsync(p.gate, p.up, p.out, p.n, stream));
  return absl::OkStatus();
}

absl::Status LaunchSwiGluToBf16(const SwiGluToBf16Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.ffn); !s.ok()) return s;
  if (p.rows == 0 || p.ffn == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::SwiGluToBf16Async(p.gate_up, p.out, p.rows, p.ffn, stream));
  return absl::OkStatus();
}

absl::Status LaunchToBf16(const ToBf16Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.n); !s.ok()) return s;
  if (p.n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::ToBf16Async(p.x, p.out, p.n, stream));
  return absl::OkStatus();
}

absl::Status LaunchGatherRowsBf16(const GatherRowsBf16Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.n, p.dim); !s.ok()) return s;
  if (p.n == 0 || p.dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::GatherRowsBf16Async(p.in, p.rows, p.n, p.dim, p.out, stream));
  return absl::OkStatus();
}

absl::Status LaunchFillRandomBf16(const FillRandomBf16Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.n); !s.ok()) return s;
  if (p.n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::FillRandomBf16Async(p.out, p.n, p.seed, p.scale, stream));
  return absl::OkStatus();
}

absl::Status LaunchFillF32(const FillF32Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.n); !s.ok()) return s;
  if (p.n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::FillF32Async(p.out, p.n, p.value, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

absl::Status LaunchEmbed(const EmbedParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchEmbedBf16(const EmbedBf16Params&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchSwiGlu(const SwiGluParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchSwiGluToBf16(const SwiGluToBf16Params&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchToBf16(const ToBf16Params&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchGatherRowsBf16(const GatherRowsBf16Params&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchFillRandomBf16(const FillRandomBf16Params&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchFillF32(const FillF32Params&, cudaStream_t) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
