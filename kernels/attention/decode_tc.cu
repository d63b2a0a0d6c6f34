// The tensor-core decode whose block's warps split a part's keys (decode_tc_kernel.cuh):
// dispatch on head dim and GQA subgroup. Plain CUDA C++ (no Abseil): split_kv.cc turns the
// cudaError_t into a Status.
#include <cuda_runtime.h>

#include "kernels/attention/decode_tc_kernel.cuh"
#include "kernels/attention/prefill_launch.h"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {

cudaError_t PagedDecodeTcKeyWarpsAsync(const PrefillTcParams& p, int key_warps, cudaStream_t stream) {
  if (p.qo_indptr != nullptr || p.head_dim > 128 || (key_warps != 2 && key_warps != 4)) return cudaErrorInvalidValue;
  const int subgroup = GqaSubgroupSize(p.num_heads / p.kv_heads);
  if (subgroup == 0) return cudaErrorInvalidValue;
  // Two stages a warp (as fast as three on the H100, in less shared memory).
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, kHeadDim, {
    if constexpr (kHeadDim <= 128) {
      STRATA_DISPATCH_GQA_GROUP_SIZE(subgroup, kGroup, {
        return key_warps == 2 ? decode_tc::LaunchDecodeTc<kHeadDim, kGroup, 2, 2>(p, stream)
                              : decode_tc::LaunchDecodeTc<kHeadDim, kGroup, 4, 2>(p, stream);
      })
    }
  })
  return cudaErrorInvalidValue;
}

}  // namespace strata::kernels::internal
