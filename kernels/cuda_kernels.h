// CUDA twins of the CPU kernels (cpu_kernels.h, the specification): the same semantics on
// device pointers, fp32 for now. Each Launch* function only enqueues work on the given
// stream (never creates or synchronises one) and returns once it is enqueued; the result is
// ready when the stream reaches that point. All pointers are device pointers that must stay
// valid until then; the caller owns them. Thread-safe (CUDA streams serialise the work).
//
// Errors: InvalidArgument for a negative size or an odd head_dim (nothing is launched);
// InternalError, naming the failed call and the CUDA error, when a launch fails (a CUDA
// error from earlier asynchronous work on the device can surface here too); Unimplemented
// when strata was built without CUDA (STRATA_WITH_CUDA is not defined).
//
// Numerics: within fp32 rounding of the CPU twin (the tests allow 1e-5 relative); unlike
// the CPU kernels, reductions here are not bit-for-bit the CPU's order, but each output is
// still computed by the same operations whatever the number of rows (except the paged
// attention kernels, whose split along the sequence follows the batch; see there).
#ifndef STRATA_KERNELS_CUDA_KERNELS_H_
#define STRATA_KERNELS_CUDA_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cpu_kernels.h"

#if defined(STRATA_WITH_CUDA)
#include <cuda_runtime_api.h>
#else
typedef struct CUstream_st* cudaStream_t;
#endif

namespace strata::kernels {

// RmsNorm (cpu_kernels.h): y[r] = x[r] * (1/sqrt(mean(x[r]^2) + eps)) * weight; x and y are
// [rows][dim] and may be the same buffer.
absl::Status LaunchRmsNorm(const float* x, const float* weight, float* y, int rows, int dim,
                           float eps, cudaStream_t stream);

// Greedy sampling on the device: ids[r] = the argmax of logits[r] ([rows][vocab], finite or
// -inf, at least one finite), lowest index on ties: SampleToken with temperature 0.
absl::Status LaunchArgmax(const float* logits, int rows, int vocab, int32_t* ids, cudaStream_t stream);

// AddRmsNorm: residual += x, then y = RmsNorm(residual), in one pass over each row (one
// block per row). y may alias x; neither may alias residual.
absl::Status LaunchAddRmsNorm(const float* x, float* residual, const float* weight, float* y, int rows, int dim,
                              float eps, cudaStream_t stream);

// SwiGlu: out[i] = silu(gate[i]) * up[i] for i < n; out may be gate or up.
absl::Status LaunchSwiGlu(const float* gate, const float* up, float* out, int64_t n,
                          cudaStream_t stream);

// Embed: out[r] = table[ids[r]] (rows of dim floats). ids is a device array of rows valid
// row numbers of table (not checked: the ids are on the device).
absl::Status LaunchEmbed(const float* table, const int32_t* ids, int rows, int dim, float* out,
                         cudaStream_t stream);

// ApplyRope, in place on x [rows][heads][head_dim]: positions [rows] and inv_freq
// [head_dim/2] (RopeInvFreq) are device arrays. head_dim must be even.
absl::Status LaunchApplyRope(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                             const float* inv_freq, cudaStream_t stream);

// PlaceKvPaged (cpu_kernels.h) on the device: rotates the pre-RoPE K rows and scatters them,
// with V, into the bf16 pool in one pass. positions, slots and inv_freq are device arrays.
// Numerics: the rotation as LaunchApplyRope (within fp32 rounding of the CPU), so a stored
// value may differ from the twin's by one bf16 unit where the fp32 result sits on a
// rounding boundary. InvalidArgument for an odd head_dim or negative sizes.
absl::Status LaunchPlaceKvPaged(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots,
                                int n, int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages,
                                uint16_t* v_pages, cudaStream_t stream);

// PagedDecodeAttention (cpu_kernels.h) on the device, split along the sequence: each
// sequence's tokens go in parts of equal size, each part's (o, lse) is computed by one
// block per (part, KV head, sequence) that serves all the KV head's query heads in one
// pass over the part's K and V (16-byte cp.async loads, kept several stages in flight),
// then the parts are merged by log-sum-exp (skipped when there is one part). The number
// of parts is chosen from batch x KV heads against the device's multiprocessor count
// (kDecodeBlocksPerSm blocks per SM), parts being multiples of kDecodePartAlign tokens.
// `kv`'s pointers are device pointers; `max_tokens` bounds every sequence's length (with
// the batch it sets the number of parts); `workspace` holds DecodeWorkspaceFloats(...)
// floats (unused when one part suffices). lse may be null. q, k_pages and
// v_pages must be 16-byte aligned (cudaMalloc'd buffers are). InvalidArgument unless
// head_dim is 64 or 128 and there are 1, 2, 4 or 8 query heads per KV head.
//
// Numerics: as the other twins, within 1e-5 of the CPU; but the split depends on the
// batch size and max_tokens, so a sequence's result may differ in the last bits between
// batches of different shapes (the same call on the same device gives the same bits).
constexpr int kDecodeBlocksPerSm = 2;
constexpr int kDecodePartAlign = 32;
int64_t DecodeWorkspaceFloats(int batch, int num_heads, int head_dim, int64_t max_tokens);
absl::Status LaunchPagedDecodeAttention(const float* q, const PagedKv& kv, int batch, int num_heads, float scale,
                                        int64_t max_tokens, float* workspace, float* out, float* lse,
                                        cudaStream_t stream);

// PagedPrefillAttention (cpu_kernels.h) on the device: `rows` new-token queries, those of
// sequence b at rows [qo_indptr[b], qo_indptr[b+1]) (qo_indptr a device array), causal
// over the sequence's cached and new tokens (their KV already placed in the pool). Same
// parts-and-merge scheme and limits as the decode kernel, whose K/V sweep it runs per
// query row on CUDA cores (fp32 accuracy; LaunchPagedPrefillAttentionTc in
// cuda_prefill_attention.h is the fast, tensor-core version). Workspace:
// DecodeWorkspaceFloats(rows, num_heads, head_dim, max_tokens).
absl::Status LaunchPagedPrefillAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch,
                                         int rows, int num_heads, float scale, int64_t max_tokens, float* workspace,
                                         float* out, float* lse, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_CUDA_KERNELS_H_
