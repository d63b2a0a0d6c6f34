// What the Launch* wrappers (the .cc files beside each op) share: the size check and the
// answer of a build without CUDA. For kernels' own .cc files only.
#ifndef STRATA_KERNELS_LAUNCH_CHECKS_H_
#define STRATA_KERNELS_LAUNCH_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::internal {

// InvalidArgument("negative kernel size") when any size is negative, OK otherwise.
inline absl::Status CheckSizes(int64_t a, int64_t b = 0, int64_t c = 0) {
  if (a < 0 || b < 0 || c < 0) return absl::InvalidArgumentError("negative kernel size");
  return absl::OkStatus();
}

// Floats rounded up so that a workspace's next sub-buffer starts on 16 bytes (kernels
// store float2 / float4 into them).
inline int64_t Align4Floats(int64_t floats) { return (floats + 3) / 4 * 4; }

// What every Launch* returns when strata was built without CUDA.
inline absl::Status NoCuda() { return absl::UnimplementedError("strata was built without CUDA"); }

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_LAUNCH_CHECKS_H_
