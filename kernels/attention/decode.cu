// The split-K paged attention kernel behind decode.h (and the CUDA-core prefill of
// prefill.h). Plain CUDA C++ (no Abseil): the launch returns cudaError_t and split_kv.cc
// turns it into absl::Status.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/decode_kernel.cuh"
#include "kernels/attention/decode_launch.h"
#include "kernels/attention/merge_launch.h"
#include "kernels/dependent_launch.cuh"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {
namespace {

// One block per (part, KV head and subgroup, query row): DecodePartBlock.
template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kDecodeThreads) PagedDecodeKernel(const SplitKvArgs a) {
  __shared__ __align__(16) unsigned char smem[DecodeBlockShape<kHeadDim, kGroup>::kSmemBytes];
  DecodePartBlock<kHeadDim, kGroup>(a, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, smem);
}

// The same block in at most 96 registers a thread (SplitKvArgs::lean; ptxas spills 12 bytes
// at head_dim 128): 128 x 96 fit on an SM beside the wgmma system part's lean block, 384 x
// 136 (prefill_launch.h), 64,512 of its 65,536 registers.
template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kDecodeThreads, 5) PagedDecodeLeanKernel(const SplitKvArgs a) {
  __shared__ __align__(16) unsigned char smem[DecodeBlockShape<kHeadDim, kGroup>::kSmemBytes];
  DecodePartBlock<kHeadDim, kGroup>(a, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, smem);
}

// The kernel of a launch: the lean form only where it is compiled (head_dim 64 and 128).
template <int kHeadDim, int kGroup>
void (*KernelFor(bool lean))(SplitKvArgs) {
  if constexpr (kHeadDim == 64 || kHeadDim == 128) {
    if (lean) return PagedDecodeLeanKernel<kHeadDim, kGroup>;
  }
  return PagedDecodeKernel<kHeadDim, kGroup>;
}

}  // namespace

cudaError_t PagedDecodeAttentionAsync(const SplitKvArgs& a, cudaStream_t stream) {
  const int group = a.num_heads / a.kv_heads, subgroup = GqaSubgroupSize(group);
  if (subgroup == 0) return cudaErrorInvalidValue;
  const dim3 grid(a.splits, a.kv_heads * (group / subgroup), a.rows);
  cudaError_t e = cudaErrorInvalidValue;
  STRATA_DISPATCH_HEAD_DIM(a.head_dim, kHeadDim, {
    STRATA_DISPATCH_GQA_GROUP_SIZE(subgroup, kGroup, {
      e = LaunchKernel(KernelFor<kHeadDim, kGroup>(a.lean), grid, dim3(kDecodeThreads), 0, stream, a.dependent, a);
    })
  })
  if (e != cudaSuccess || a.splits == 1) return e;
  return MergeStatesAsync(a.ws_o, a.ws_lse, a.splits, a.rows, a.num_heads, a.head_dim, a.out, a.lse, stream,
                          nullptr, a.out_bf16);
}

}  // namespace strata::kernels::internal
