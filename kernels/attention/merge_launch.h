// Raw launch of the (o, lse) merge in merge.cu (FlashInfer's merge_state over several parts:
// the log-sum-exp merge that split-K decode and relay attention use). Kept free of
// Abseil so nvcc never parses it; arguments are validated by the caller.
#ifndef STRATA_KERNELS_ATTENTION_MERGE_LAUNCH_H_
#define STRATA_KERNELS_ATTENTION_MERGE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::internal {

// For each of `rows` rows and each head: merges `splits` partial attentions over disjoint key
// sets, part s of row b at ws_o[((b * splits + s) * num_heads + h) * head_dim] (normalised
// output) and ws_lse[(b * splits + s) * num_heads + h] (natural-log lse; -inf for an empty
// part), into out [rows][num_heads][head_dim] and lse [rows][num_heads] (lse may be null).
// The specification is MergeAttentionStates (kernels/testing/attention_cpu.h) applied part by
// part; rows whose parts are all empty get o = 0 and lse = -inf. With `out_lse`
// ([rows][num_heads]), `out` holds one more part on entry (relay attention's context part,
// of lse out_lse) and the merge takes it in, in place. With `out_bf16`, the merged rows go
// there as bf16 (the rounding of ToBf16, elementwise.h), not to `out` (then read only for
// out_lse's part): the cast a step does next, fused.
cudaError_t MergeStatesAsync(const float* ws_o, const float* ws_lse, int splits, int rows, int num_heads,
                             int head_dim, float* out, float* lse, cudaStream_t stream,
                             const float* out_lse = nullptr, uint16_t* out_bf16 = nullptr);

// The same merge with rows of different part counts, for relay attention's fused launch:
// part s of row b at ws_o[((b * row_parts + s) * num_heads + h) * head_dim] and
// ws_lse[(b * row_parts + s) * num_heads + h]; rows [0, full_rows) merge all row_parts
// parts, the rows after them only their first few_parts (the rest are never read). Writes
// out [rows][num_heads][head_dim] (no lse). One warp per (row, head); ws_o and out must be
// 16-byte aligned and head_dim a multiple of 4.
cudaError_t MergeRowPartsAsync(const float* ws_o, const float* ws_lse, int row_parts, int full_rows, int few_parts,
                               int rows, int num_heads, int head_dim, float* out, cudaStream_t stream);

// The warp-per-row merge loads up to 8 parts' rows at once (the default); false: part by part
// in groups of 4, as before, for benchmarks that compare the two (docs/BENCHMARKS.md).
void SetMergeLoadsAtOnceForBenchmarks(bool at_once);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_MERGE_LAUNCH_H_
