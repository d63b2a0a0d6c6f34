// Raw launch of relay attention's fused kernel (relay_kernel.cuh), for relay.cc only. Kept
// free of Abseil so nvcc never parses it; arguments are validated by the caller.
#ifndef STRATA_KERNELS_ATTENTION_RELAY_LAUNCH_H_
#define STRATA_KERNELS_ATTENTION_RELAY_LAUNCH_H_

#include <cuda_runtime_api.h>

#include "kernels/attention/decode_launch.h"
#include "kernels/attention/prefill_launch.h"

namespace strata::kernels::internal {

// One launch of both parts of a relay decode (relay.h): its first system_blocks blocks are
// the system part's tiles (the tensor-core prefill kernel's 64-row block with all_keys over
// `system`, whose grid would be system_grid_x x system_grid_y x groups), the rest the
// context part's blocks (the split-K decode kernel's block over `context`, whose grid would
// be context.splits x context_grid_y x context.rows). Both write every part to their
// workspace rows (ws_row_parts set in both): the merge (MergeRowPartsAsync) runs after.
struct RelayFusedArgs {
  PrefillTcParams system;
  SplitKvArgs context;
  int system_blocks, system_grid_x, system_grid_y;
  int context_grid_y;
  int blocks;  // system_blocks + context.splits * context_grid_y * context.rows
  bool context_first = false;  // the context part's blocks take the grid's first indices instead
  // When set, nothing is launched: the kernel's resident blocks per SM are written here.
  int* resident_blocks_out = nullptr;
};

// The fused kernel of one head dim (every GQA subgroup size), instantiated beside the
// tensor-core prefill kernels in prefill_tc_hd*.cu.
template <int kHeadDim>
cudaError_t RelayFusedForHeadDim(const RelayFusedArgs& a, cudaStream_t stream);
extern template cudaError_t RelayFusedForHeadDim<64>(const RelayFusedArgs&, cudaStream_t);
extern template cudaError_t RelayFusedForHeadDim<80>(const RelayFusedArgs&, cudaStream_t);
extern template cudaError_t RelayFusedForHeadDim<96>(const RelayFusedArgs&, cudaStream_t);
extern template cudaError_t RelayFusedForHeadDim<128>(const RelayFusedArgs&, cudaStream_t);
extern template cudaError_t RelayFusedForHeadDim<256>(const RelayFusedArgs&, cudaStream_t);

// One launch of a whole relay decode on the tensor cores (relay_one_pass_kernel.cuh): a
// warp per (16 / G rows of a group, KV head, part), G the query heads a KV head, streams
// its part of the group's prefix once for its rows' 16 query rows, then each row's own
// keys, in one online softmax; the rows after grouped_rows have no prefix. Each of the
// `parts` parts takes its share of every key range's 32-key tiles; with parts > 1 every
// row's parts go to ws_o [rows][parts][num_heads][head_dim] and ws_lse
// [rows][parts][num_heads] for MergeStatesAsync, else the rows go to out. `chunks`: the
// grid's rows of warps, ceil(rows of the largest group (or of the ungrouped rows) / (16 /
// G)). `key_tile` keys a tile, `stages` cp.async stages a warp: one of
// kRelayOnePassForms.
struct RelayOnePassArgs {
  const float* q;
  const uint16_t* k_pages;
  const uint16_t* v_pages;
  int page_size, kv_heads, head_dim, num_heads;
  const int32_t* ctx_indptr;
  const int32_t* ctx_indices;
  const int32_t* ctx_last;
  const int32_t* pre_indptr;
  const int32_t* pre_indices;
  const int32_t* pre_last;
  const int32_t* group_rows;
  int rows, groups, grouped_rows;
  float scale;
  int parts, chunks, key_tile, stages;
  float* ws_o;
  float* ws_lse;
  float* out;
  // When set, nothing is launched: the kernel's resident blocks (warps) per SM go here.
  int* resident_blocks_out = nullptr;
};
// The one-pass kernel's built (key_tile, stages) forms.
struct RelayOnePassForm {
  int key_tile, stages;
};
inline constexpr RelayOnePassForm kRelayOnePassForms[] = {{32, 2}, {32, 3}, {16, 4}, {16, 6}, {64, 2}};
// Whether the one-pass kernel is built for this head_dim and query heads per KV head.
bool RelayOnePassTakes(int head_dim, int group);
cudaError_t RelayOnePassAsync(const RelayOnePassArgs& a, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_RELAY_LAUNCH_H_
