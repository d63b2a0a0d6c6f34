// Paged prefill attention on tensor cores: the engine's prefill path on Hopper/Ampere
// (mma.sync m16n8k16, bf16 operands, fp32 accumulation and softmax), FlashAttention-2 style.
// Same semantics as the CPU specification PagedPrefillAttention (cpu_kernels.h) and a
// drop-in for LaunchPagedPrefillAttention (cuda_kernels.h), without its workspace.
#ifndef STRATA_KERNELS_CUDA_PREFILL_ATTENTION_H_
#define STRATA_KERNELS_CUDA_PREFILL_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cpu_kernels.h"
#include "kernels/cuda_kernels.h"

namespace strata::kernels {

// Causal attention of `rows` new-token queries over a paged KV pool: the new tokens of
// sequence b are rows [qo_indptr[b], qo_indptr[b+1]) of q ([rows][num_heads][head_dim],
// fp32, rotated), and are the last tokens of that sequence, whose KV (cached history and
// the new tokens) is already in the pool; each sees the sequence's tokens up to its own
// position. Writes out [rows][num_heads][head_dim] (fp32) and, unless lse is null, lse
// [rows][num_heads] (natural log of the softmax denominator, scores scaled by `scale`).
// `max_new_tokens` must be at least every sequence's number of new tokens (it sizes the
// grid; rows of a sequence beyond it would not be computed). A sequence may have no new
// tokens.
//
// kv's pointers, q, qo_indptr, out and lse are device pointers that must stay valid until
// the stream reaches the work; q, k_pages and v_pages must be 16-byte aligned and out
// 8-byte aligned (cudaMalloc'd buffers are). Only enqueues on `stream`; thread-safe.
//
// Errors: InvalidArgument (nothing launched) unless head_dim is 64 or 128, there are 1, 2,
// 4 or 8 query heads per KV head, page_size > 0, 0 < scale < inf (the running maximum is
// taken over unscaled scores), sizes are non-negative, batch and
// kv_heads are at most 65535 and the pointers are aligned as above; InternalError naming
// the CUDA error when the launch fails; Unimplemented without CUDA.
//
// Numerics: Q is rounded to bf16 (K and V are bf16 already) and the softmax weights P are
// rounded to bf16 before P·V, all sums in fp32: bf16-operand accuracy, within 1e-2 of the
// CPU twin relative to the output's norm (typically 2e-3); lse is off by at most about
// the largest shift of a score from rounding q, 2^-9 * scale * sum_i |q_i k_i| (the
// softmax sum itself is fp32).
// Each output depends only on its own query row and its sequence's KV (no split along the
// sequence), so results do not change with the batch.
absl::Status LaunchPagedPrefillAttentionTc(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch,
                                           int rows, int num_heads, float scale, int max_new_tokens, float* out,
                                           float* lse, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_CUDA_PREFILL_ATTENTION_H_
