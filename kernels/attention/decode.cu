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

}  // namespace

cudaError_t PagedDecodeAttentionAsync(const SplitKvArgs& a, cudaStream_t stream) {
  const int group = a.num_heads / a.kv_heads, subgroup = GqaSubgroupSize(group);
  if (subgroup == 0) return cudaErrorInvalidValue;
  const dim3 grid(a.splits, a.kv_heads * (group / subgroup), a.rows);
  cudaError_t e = cudaErrorInvalidValue;
  STRATA_DISPATCH_HEAD_DIM(a.head_dim, kHeadDim, {
    STRATA_DISPATCH_GQA_GROUP_SIZE(subgroup, kGroup, {
      e = LaunchKernel(PagedDecodeKernel<kHeadDim, kGroup>, grid, dim3(kDecodeThreads), 0, stream, a.dependent, a);
    })
  })
  if (e != cudaSuccess || a.splits == 1) return e;
  return MergeStatesAsync(a.ws_o, a.ws_lse, a.splits, a.rows, a.num_heads, a.head_dim, a.out, a.lse, stream,
                          nullptr, a.out_bf16);
}

}  // namespace strata::kernels::internal
