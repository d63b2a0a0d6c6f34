// kernels/norm: RMSNorm on the device. The fp32 kernels are the twins of the CPU
// specification (norm_cpu.h: RmsNorm; the fused forms' CPU twins are in
// kernels/testing/norm_cpu.h); RmsNormToBf16 is the CUDA backend's norm ahead of its bf16
// matrix products.
//
// Conventions of every Launch* here: all pointers are device pointers the caller owns and
// keeps valid until the stream reaches the work; the call only enqueues on `stream` (never
// creates or synchronises one) and is thread-safe. Errors: InvalidArgument (nothing
// launched) for the bad shapes named per function; InternalError, naming the failed call
// and the CUDA error, when a launch fails (an error from earlier asynchronous work can
// surface here too); Unimplemented when strata was built without CUDA.
//
// Numerics: within fp32 rounding of the CPU twin (the tests allow 1e-5 relative); the
// reduction order is not the CPU's, but each row is computed by the same operations
// whatever the number of rows. A bf16 output may differ from the twin's by one unit where
// the fp32 value sits on a rounding boundary.
#ifndef STRATA_KERNELS_NORM_NORM_H_
#define STRATA_KERNELS_NORM_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/stream.h"

namespace strata::kernels {

// y[r] = x[r] * (1/sqrt(mean(x[r]^2) + eps)) * weight; x and y are [rows][dim] and may be
// the same buffer, weight is [dim]. InvalidArgument for a negative size.
struct RmsNormParams {
  const float* x;
  const float* weight;
  float* y;
  int rows, dim;
  float eps;
};
absl::Status LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream);

// Qwen3's q/k norms, in place on the QKV projection's output: in each of `rows` rows (row r
// at x + r * row_stride), the first q_heads heads of head_dim values are RmsNorm'ed with
// q_weight and the k_heads after them with k_weight (each head on its own). InvalidArgument
// for a negative size.
struct HeadRmsNormParams {
  float* x;
  int rows;
  int64_t row_stride;
  int q_heads, k_heads, head_dim;
  const float* q_weight;
  const float* k_weight;
  float eps;
};
absl::Status LaunchHeadRmsNorm(const HeadRmsNormParams& p, cudaStream_t stream);

// residual += x, then y = RmsNorm(residual), in one pass over each row (one block per row).
// y may alias x; neither may alias residual. InvalidArgument for a negative size.
struct AddRmsNormParams {
  const float* x;
  float* residual;
  const float* weight;
  float* y;
  int rows, dim;
  float eps;
};
absl::Status LaunchAddRmsNorm(const AddRmsNormParams& p, cudaStream_t stream);

// y = bf16(RmsNorm(x)) ([rows][dim]); with `add` non-null, first x += add (x is then the
// updated residual stream). x, add: [rows][dim] fp32. InvalidArgument for a negative size.
struct RmsNormToBf16Params {
  const float* add;  // may be null
  float* x;
  const float* weight;
  uint16_t* y;
  int rows, dim;
  float eps;
};
absl::Status LaunchRmsNormToBf16(const RmsNormToBf16Params& p, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_NORM_NORM_H_
