// The tensor-core decode whose block's warps split a part's keys (decode_tc_kernel.cuh):
// dispatch on head dim and GQA subgroup. Plain CUDA C++ (no Abseil): split_kv.cc turns the
// cudaError_t into a Status.
#include <cuda_runtime.h>

#include "kernels/attention/decode_tc_kernel.cuh"
#include "kernels/attention/prefill_launch.h"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {

cudaError_t PagedDecodeTcKeyWarpsAsync(const PrefillTcParams& p, cudaStream_t stream) {
  if (p.qo_indptr != nullptr || p.head_dim > 128) return cudaErrorInvalidValue;
  const int subgroup = GqaSubgroupSize(p.num_heads / p.kv_heads);
  if (subgroup == 0) return cudaErrorInvalidValue;
  // Two warps of two stages each (the fastest of 2 or 4 warps, 2 or 3 stages on the H100).
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, kHeadDim, {
    if constexpr (kHeadDim <= 128) {
      STRATA_DISPATCH_GQA_GROUP_SIZE(subgroup, kGroup, { return decode_tc::LaunchDecodeTc<kHeadDim, kGroup, 2, 2>(p, stream); })
    }
  })
  return cudaErrorInvalidValue;
}

}  // namespace strata::kernels::internal
