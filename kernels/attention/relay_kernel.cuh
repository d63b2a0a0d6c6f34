// Relay attention's fused kernel (relay_launch.h): the system part's tensor-core tiles and
// the context part's split-K decode blocks in one grid, as templates for the
// prefill_tc_hd*.cu files that instantiate them beside the prefill kernels. Plain CUDA C++
// (no Abseil).
#ifndef STRATA_KERNELS_ATTENTION_RELAY_KERNEL_CUH_
#define STRATA_KERNELS_ATTENTION_RELAY_KERNEL_CUH_

#include <cuda_runtime.h>

#include "kernels/attention/decode_kernel.cuh"
#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/attention/relay_launch.h"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {
namespace relay {

// The system part's block: 64 query rows on 4 warps (the decode block's 128 threads), K/V
// tiles of 32 keys, three stages deep (two at head_dim 256, whose Q tile and stages take
// 101 KB): 70 KB of shared memory at head_dim 128, so three blocks of either role fit an SM.
constexpr int kWarps = 4, kTileRows = 64, kKeyTile = 32;
template <int kHeadDim>
constexpr int kStages = kHeadDim == 256 ? 2 : 3;
static_assert(kWarps * 32 == kDecodeThreads, "both roles run on the same block");

template <int kHeadDim, int kGroup>
constexpr int SmemBytes() {
  constexpr int system = prefill_tc::SmemBytes<kHeadDim>(kTileRows, kKeyTile, kStages<kHeadDim>);
  constexpr int context = DecodeBlockShape<kHeadDim, kGroup>::kSmemBytes;
  return system > context ? system : context;
}

// Three blocks an SM where the shared memory allows (168 registers a thread).
template <int kHeadDim, int kGroup>
constexpr int kMinBlocks = kHeadDim <= 128 ? 3 : 1;

// Blocks [0, system_blocks) take the system part's tiles in the order of its own grid
// (parts of a tile, then tiles, KV heads, groups): the long blocks start first, and the
// context part's blocks fill the SMs as they finish. Dynamic shared memory: SmemBytes().
template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kDecodeThreads, kMinBlocks<kHeadDim, kGroup>)
    RelayDecodeKernel(const RelayFusedArgs a) {
  extern __shared__ __align__(16) uint16_t smem[];
  int block = static_cast<int>(blockIdx.x);
  if (a.context_first) {
    const int context_blocks = a.blocks - a.system_blocks;
    block = block < context_blocks ? a.system_blocks + block : block - context_blocks;
  }
  if (block < a.system_blocks) {
    const int per_group = a.system_grid_x * a.system_grid_y, in_group = block % per_group;
    prefill_tc::PrefillTcBlock<kHeadDim, kGroup, kWarps, 1, kKeyTile, kStages<kHeadDim>>(
        a.system, in_group % a.system_grid_x, in_group / a.system_grid_x, block / per_group, a.system_grid_x, smem);
  } else {
    const int j = block - a.system_blocks, splits = a.context.splits, per_row = splits * a.context_grid_y;
    DecodePartBlock<kHeadDim, kGroup>(a.context, j % splits, j % per_row / splits, j / per_row, splits,
                                      reinterpret_cast<unsigned char*>(smem));
  }
}

template <int kHeadDim, int kGroup>
cudaError_t Launch(const RelayFusedArgs& a, cudaStream_t stream) {
  constexpr int kSmem = SmemBytes<kHeadDim, kGroup>();
  auto* kernel = RelayDecodeKernel<kHeadDim, kGroup>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      e != cudaSuccess) {
    return e;
  }
  if (a.resident_blocks_out != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(a.resident_blocks_out, kernel, kDecodeThreads, kSmem);
  }
  kernel<<<a.blocks, kDecodeThreads, kSmem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace relay

template <int kHeadDim>
cudaError_t RelayFusedForHeadDim(const RelayFusedArgs& a, cudaStream_t stream) {
  STRATA_DISPATCH_GQA_GROUP_SIZE(GqaSubgroupSize(a.context.num_heads / a.context.kv_heads), kGroup,
                                 { return relay::Launch<kHeadDim, kGroup>(a, stream); })
  return cudaErrorInvalidValue;
}

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_RELAY_KERNEL_CUH_
