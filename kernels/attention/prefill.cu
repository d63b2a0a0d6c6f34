// The tensor-core paged prefill attention behind prefill.h: chooses the tile form and
// dispatches on head dim to the kernels of prefill_tc_kernel.cuh, which the
// prefill_tc_hd*.cu files compile. Plain CUDA C++ (no Abseil): the launch returns
// cudaError_t and prefill.cc turns it into a Status.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {

cudaError_t PagedPrefillAttentionTcAsync(const PrefillTcParams& p, PrefillTcTiles tiles, cudaStream_t stream) {
  if (tiles == PrefillTcTiles::kAuto) {
    // 128-row tiles (32 rows a warp) when they still give every SM two blocks; 64-row
    // tiles otherwise (short prompts, decode-like batches).
    int device = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) {
      return e;
    }
    const int group = p.num_heads / p.kv_heads, subgroup = GqaSubgroupSize(group);
    if (subgroup == 0) return cudaErrorInvalidValue;
    const int64_t blocks = (int64_t{p.max_new_tokens} * subgroup + 127) / 128 * p.kv_heads * (group / subgroup) * p.batch;
    tiles = blocks >= 2 * sms ? PrefillTcTiles::k128Rows4Warps : PrefillTcTiles::k64Rows4Warps;
  }
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, kHeadDim, { return PrefillTcForHeadDim<kHeadDim>(p, tiles, stream); })
  return cudaErrorInvalidValue;
}

}  // namespace strata::kernels::internal
