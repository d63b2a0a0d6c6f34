// Paged prefill attention on the device (conventions: decode.h). Two kernels with the
// semantics of the CPU specification PagedPrefillAttention (kernels/testing/attention_cpu.h):
// LaunchPagedPrefillAttention runs decode.h's split-K kernel per query row on CUDA cores
// (fp32 accuracy), LaunchPagedPrefillAttentionTc is the engine's prefill on Hopper/Ampere
// tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulation and softmax),
// FlashAttention-2 style, split along the keys when given a workspace and few query tiles;
// on an sm_90 device at head_dim 64 or 128 it takes the warp-specialised wgmma form
// (prefill_launch.h) instead, split by its own rule, the same outputs within bf16 rounding.
#ifndef STRATA_KERNELS_ATTENTION_PREFILL_H_
#define STRATA_KERNELS_ATTENTION_PREFILL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/stream.h"

namespace strata::kernels {

// `rows` new-token queries, those of sequence b at rows [qo_indptr[b], qo_indptr[b+1]) of q
// ([rows][num_heads][head_dim], fp32, rotated; qo_indptr a device array [batch + 1]), causal
// over the sequence's cached and new tokens (their KV already placed in the pool): each sees
// the sequence's tokens up to its own position. out [rows][num_heads][head_dim], lse
// [rows][num_heads] (may be null). Same parts-and-merge scheme, limits and errors as
// LaunchPagedDecodeAttention. Workspace: DecodeWorkspaceFloats(rows, num_heads, head_dim,
// max_tokens).
struct PrefillAttentionParams {
  const float* q;
  PagedKv kv;
  const int32_t* qo_indptr;
  int batch, rows, num_heads;
  float scale;
  int64_t max_tokens;
  float* workspace;
  float* out;
  float* lse;  // may be null
};
absl::Status LaunchPagedPrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream);

// The tensor-core form: queries, KV and outputs as PrefillAttentionParams (lse: natural log
// of the softmax denominator, scores scaled by `scale`). `max_new_tokens` must be at least
// every sequence's number of new tokens (it sizes the grid; rows of a sequence beyond it
// would not be computed). A sequence may have no new tokens. q, k_pages and v_pages must be
// 16-byte aligned and out 8-byte aligned (cudaMalloc'd buffers are).
//
// Errors: InvalidArgument (nothing launched) unless head_dim is 64, 80, 96, 128 or
// 256, there are 1 to 64 query heads per KV head (dispatch.h), page_size > 0, 0 < scale < inf (the running
// maximum is taken over unscaled scores), sizes are non-negative, batch and kv_heads are at
// most 65535 and the pointers are aligned as above.
//
// Numerics: Q is rounded to bf16 (K and V are bf16 already) and the softmax weights P are
// rounded to bf16 before P·V, all sums in fp32: bf16-operand accuracy, within 1e-2 of the
// CPU twin relative to the output's norm (typically 2e-3); lse is off by at most about
// the largest shift of a score from rounding q, 2^-9 * scale * sum_i |q_i k_i| (the
// softmax sum itself is fp32). Without a workspace each output depends only on its own
// query row and its sequence's KV, so results do not change with the batch; with one, the
// split (PrefillKeySplits) follows the step's shape, as the decode kernel's does.
//
// Split along the keys: a step with few query tiles over long histories — a returning
// turn's new tokens over its cached conversation — would leave most SMs idle, one block per
// tile walking every key. Given `workspace` (PrefillAttentionWorkspaceFloats floats) and
// `max_keys` (the most keys any of the batch's sequences has), the launch splits each
// tile's keys into PrefillKeySplits parts, blocks of 64-row tiles, and merges them on
// log-sum-exp (merge_launch.h) into out / lse: one launch more.
struct PrefillAttentionTcParams {
  const float* q;
  PagedKv kv;
  const int32_t* qo_indptr;
  int batch, rows, num_heads;
  float scale;
  int max_new_tokens;
  float* out;
  float* lse;  // may be null
  // Not causal: every query row of sequence b sees all of b's keys, as if it came after
  // them (relay attention's system part: a group's queries against their shared prefix).
  bool all_keys = false;
  float* workspace = nullptr;  // null: no split
  int64_t max_keys = 0;
};
absl::Status LaunchPagedPrefillAttentionTc(const PrefillAttentionTcParams& p, cudaStream_t stream);

// The step's shape as the split sees it.
struct PrefillSplitShape {
  int batch = 0, rows = 0, max_new_tokens = 0, num_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_keys = 0;
};
// Parts along the keys (1: no split): enough 64-row blocks for two per SM when the step has
// fewer, each part at least kPrefillMinSplitKeys keys, at most kPrefillMaxKeySplits. Without
// CUDA, 1.
inline constexpr int kPrefillMaxKeySplits = 16;
inline constexpr int64_t kPrefillMinSplitKeys = 1024;
int PrefillKeySplits(const PrefillSplitShape& s);
// Floats of the split's workspace (0 when PrefillKeySplits is 1).
int64_t PrefillAttentionWorkspaceFloats(const PrefillSplitShape& s);

namespace internal {
struct PrefillTcParams;
// The raw launch's parameters (prefill_launch.h) for `p`, unchecked, for a caller that sets
// their further fields (relay attention's split along the keys). Built with CUDA only.
PrefillTcParams ToTcParams(const PrefillAttentionTcParams& p);
}  // namespace internal

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_PREFILL_H_
