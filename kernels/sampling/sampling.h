// kernels/sampling: picking the next token on the device. The specification is SampleToken
// (sampling_cpu.h); LaunchArgmax is its greedy case, LaunchSample the whole of it with
// per-row temperature, top_p and draw.
//
// Conventions of every Launch* here: all pointers are device pointers the caller owns and
// keeps valid until the stream reaches the work; the call only enqueues on `stream` (never
// creates or synchronises one) and is thread-safe. Errors: InvalidArgument (nothing
// launched) for the bad shapes named per function; InternalError, naming the failed call
// and the CUDA error, when a launch fails (an error from earlier asynchronous work can
// surface here too); Unimplemented when strata was built without CUDA.
#ifndef STRATA_KERNELS_SAMPLING_SAMPLING_H_
#define STRATA_KERNELS_SAMPLING_SAMPLING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/stream.h"

namespace strata::kernels {

// Greedy sampling: ids[r] = the argmax of logits[r] ([rows][vocab], finite or -inf, at
// least one finite), lowest index on ties: SampleToken with temperature 0. InvalidArgument
// for a negative size, or an empty vocabulary with rows > 0.
struct ArgmaxParams {
  const float* logits;
  int rows, vocab;
  int32_t* ids;
};
absl::Status LaunchArgmax(const ArgmaxParams& p, cudaStream_t stream);

// SampleToken for each row of logits [rows][vocab] (finite or -inf, at least one finite),
// with that row's temperature, top_p and u (device arrays [rows]); ids[r] gets the token.
// Instead of sorting, the nucleus and the walk through it are found by histogram searches
// over logit values (4096 bins a pass, ~10 passes over the row). Probabilities are expf of
// the exponent computed in double (within ~1e-7 of SampleToken's double exp; order and ties
// exact); nucleus masses are summed in 2^-44 fixed point, so the draw is deterministic. The
// token equals SampleToken's except where u * mass or top_p * total falls within that
// rounding of a cumulative boundary. InvalidArgument for a negative size, or an empty
// vocabulary with rows > 0.
struct SampleParams {
  const float* logits;
  int rows, vocab;
  const float* temperature;
  const float* top_p;
  const double* u;
  int32_t* ids;
};
absl::Status LaunchSample(const SampleParams& p, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_SAMPLING_SAMPLING_H_
