// kernels/elementwise: the small kernels around the matrix products: embedding lookup,
// SwiGLU, bf16 conversion, row gathers and fills. Their CPU twins: elementwise_cpu.h (Embed,
// SwiGlu), bf16.h (conversions, ToBf16) and, for tests, kernels/testing/elementwise_cpu.h.
//
// Conventions of every Launch* here: all pointers are device pointers the caller owns and
// keeps valid until the stream reaches the work; the call only enqueues on `stream` (never
// creates or synchronises one) and is thread-safe. Errors: InvalidArgument (nothing
// launched) for the bad shapes named per function; InternalError, naming the failed call
// and the CUDA error, when a launch fails (an error from earlier asynchronous work can
// surface here too); Unimplemented when strata was built without CUDA.
// Every size check below refuses a negative size with InvalidArgument; a zero size is an
// empty launch (OK).
//
// Numerics: within fp32 rounding of the twin before any final bf16 rounding, so a bf16
// output may differ from the twin's by one unit where the fp32 value sits on a rounding
// boundary.
#ifndef STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
#define STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/stream.h"

namespace strata::kernels {

// Embed: out[r] = table[ids[r]] (rows of dim floats). ids is a device array of rows valid
// row numbers of table (not checked: the ids are on the device).
struct EmbedParams {
  const float* table;
  const int32_t* ids;
  int rows, dim;
  float* out;
};
absl::Status LaunchEmbed(const EmbedParams& p, cudaStream_t stream);

// out[r] = widen(table[ids[r]]): a bf16 table, fp32 rows out (ids as LaunchEmbed).
struct EmbedBf16Params {
  const uint16_t* table;
  const int32_t* ids;
  int rows, dim;
  float* out;
};
absl::Status LaunchEmbedBf16(const EmbedBf16Params& p, cudaStream_t stream);

// SwiGlu: out[i] = silu(gate[i]) * up[i] for i < n; out may be gate or up.
struct SwiGluParams {
  const float* gate;
  const float* up;
  float* out;
  int64_t n;
};
absl::Status LaunchSwiGlu(const SwiGluParams& p, cudaStream_t stream);

// gate_up: [rows][2 * ffn] fp32 (gate in columns [0, ffn), up in [ffn, 2 ffn));
// out[r][i] = bf16(silu(gate) * up), [rows][ffn].
struct SwiGluToBf16Params {
  const float* gate_up;
  uint16_t* out;
  int rows, ffn;
};
absl::Status LaunchSwiGluToBf16(const SwiGluToBf16Params& p, cudaStream_t stream);

// out[i] = bf16(x[i]) for i < n (ToBf16 in bf16.h).
struct ToBf16Params {
  const float* x;
  uint16_t* out;
  int64_t n;
};
absl::Status LaunchToBf16(const ToBf16Params& p, cudaStream_t stream);

// out[j] = in[rows[j]] for j < n: rows of dim bf16 values; rows is a device array.
struct GatherRowsBf16Params {
  const uint16_t* in;
  const int32_t* rows;
  int n, dim;
  uint16_t* out;
};
absl::Status LaunchGatherRowsBf16(const GatherRowsBf16Params& p, cudaStream_t stream);

// Deterministic uniform values in [-scale, scale] from (seed, index), rounded to bf16:
// random weights for benchmarks without a host copy.
struct FillRandomBf16Params {
  uint16_t* out;
  int64_t n;
  uint64_t seed;
  float scale;
};
absl::Status LaunchFillRandomBf16(const FillRandomBf16Params& p, cudaStream_t stream);

// out[i] = value for i < n.
struct FillF32Params {
  float* out;
  int64_t n;
  float value;
};
absl::Status LaunchFillF32(const FillF32Params& p, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
