// CUDA twins of bf16_kernels.h (the specification): the kernels the CUDA backend runs
// around its bf16 matrix products. Same conventions as cuda_kernels.h: every pointer is a
// device pointer owned by the caller, each Launch* only enqueues on `stream`, errors are
// InvalidArgument for bad sizes (nothing launched), InternalError for a failed launch,
// Unimplemented without CUDA.
//
// Numerics: within fp32 rounding of the twin before the final bf16 rounding, so a bf16
// output may differ from the twin's by one unit where the fp32 value sits on a rounding
// boundary. QkvRopePlace and PlaceStoredKv share one device function for K, so the rotated
// K they write for the same raw K and position is the same bits (the session cache's
// cache-on == cache-off property).
#ifndef STRATA_KERNELS_CUDA_MODEL_KERNELS_H_
#define STRATA_KERNELS_CUDA_MODEL_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/bf16_kernels.h"
#include "kernels/cuda_kernels.h"

namespace strata::kernels {

absl::Status LaunchEmbedBf16(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out,
                             cudaStream_t stream);
absl::Status LaunchRmsNormToBf16(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim,
                                 float eps, cudaStream_t stream);
absl::Status LaunchSwiGluToBf16(const float* gate_up, uint16_t* out, int rows, int ffn, cudaStream_t stream);
absl::Status LaunchToBf16(const float* x, uint16_t* out, int64_t n, cudaStream_t stream);
// head_dim even and at most 256.
absl::Status LaunchQkvRopePlace(const QkvPlaceParams& p, cudaStream_t stream);
absl::Status LaunchPlaceStoredKv(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream);
absl::Status LaunchGatherStoredKv(const StoredKvParams& p, uint16_t* stored, cudaStream_t stream);
absl::Status LaunchGatherRowsBf16(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out,
                                  cudaStream_t stream);
// SampleToken (cpu_kernels.h) for each row of logits [rows][vocab] (finite or -inf, at least
// one finite), with that row's temperature, top_p and u (device arrays [rows]); ids[r] gets
// the token. Instead of sorting, the nucleus and the walk through it are found by
// histogram searches over logit values (4096 bins a pass, ~10 passes over the row).
// Probabilities are expf of the exponent computed in double (within ~1e-7 of SampleToken's
// double exp; order and ties exact); nucleus masses are summed in 2^-44 fixed point, so
// the draw is deterministic. The token equals SampleToken's except where u * mass or
// top_p * total falls within that rounding of a cumulative boundary.
absl::Status LaunchSample(const float* logits, int rows, int vocab, const float* temperature, const float* top_p,
                          const double* u, int32_t* ids, cudaStream_t stream);

// Deterministic uniform values in [-scale, scale] from (seed, index), rounded to bf16:
// random weights for benchmarks without a host copy. And out[i] = value.
absl::Status LaunchFillRandomBf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
absl::Status LaunchFillF32(float* out, int64_t n, float value, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_CUDA_MODEL_KERNELS_H_
