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

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_RELAY_LAUNCH_H_
