// The (o, lse) merge of partial attentions (plain CUDA C++, no Abseil): see merge_launch.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/merge_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kMergeThreads = 128;

// One block per (head, sequence): merges the parts by log-sum-exp, with the part already in
// `out` (lse out_lse) when out_lse is given. Each output element is read (as that part) and
// written by the same thread.
__global__ void MergePartsKernel(const float* ws_o, const float* ws_lse, int splits, int num_heads, int head_dim,
                                 const float* out_lse, float* out, float* lse) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t row = int64_t{b} * num_heads + h;
  const float base = out_lse != nullptr ? out_lse[row] : -INFINITY;
  float m = base;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, ws_lse[(int64_t{b} * splits + s) * num_heads + h]);
  const float base_w = base == -INFINITY ? 0.0f : expf(base - m);
  float total = base_w;
  for (int s = 0; s < splits; ++s) {
    const float l = ws_lse[(int64_t{b} * splits + s) * num_heads + h];
    total += l == -INFINITY ? 0.0f : expf(l - m);
  }
  for (int d = threadIdx.x; d < head_dim; d += kMergeThreads) {
    float acc = base_w > 0.0f ? base_w * out[row * head_dim + d] : 0.0f;
    for (int s = 0; s < splits; ++s) {
      const int64_t r = (int64_t{b} * splits + s) * num_heads + h;
      const float l = ws_lse[r];
      if (l != -INFINITY) acc += expf(l - m) * ws_o[r * head_dim + d];
    }
    out[row * head_dim + d] = total > 0 ? acc / total : 0.0f;
  }
  if (lse != nullptr && threadIdx.x == 0) lse[row] = total > 0 ? m + logf(total) : -INFINITY;
}

}  // namespace

cudaError_t MergeStatesAsync(const float* ws_o, const float* ws_lse, int splits, int rows, int num_heads,
                             int head_dim, float* out, float* lse, cudaStream_t stream, const float* out_lse) {
  MergePartsKernel<<<dim3(num_heads, rows), kMergeThreads, 0, stream>>>(ws_o, ws_lse, splits, num_heads, head_dim,
                                                                         out_lse, out, lse);
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
