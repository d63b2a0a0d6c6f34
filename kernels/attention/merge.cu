// The (o, lse) merge of partial attentions (plain CUDA C++, no Abseil): see merge_launch.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/merge_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kMergeThreads = 128;

// One block per (head, sequence): merges the parts by log-sum-exp.
__global__ void MergePartsKernel(const float* ws_o, const float* ws_lse, int splits, int num_heads, int head_dim,
                                 float* out, float* lse) {
  const int h = blockIdx.x, b = blockIdx.y;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, ws_lse[(int64_t{b} * splits + s) * num_heads + h]);
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float l = ws_lse[(int64_t{b} * splits + s) * num_heads + h];
    total += l == -INFINITY ? 0.0f : expf(l - m);
  }
  for (int d = threadIdx.x; d < head_dim; d += kMergeThreads) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const int64_t r = (int64_t{b} * splits + s) * num_heads + h;
      const float l = ws_lse[r];
      if (l != -INFINITY) acc += expf(l - m) * ws_o[r * head_dim + d];
    }
    out[(int64_t{b} * num_heads + h) * head_dim + d] = total > 0 ? acc / total : 0.0f;
  }
  if (lse != nullptr && threadIdx.x == 0) lse[int64_t{b} * num_heads + h] = total > 0 ? m + logf(total) : -INFINITY;
}

// One block per (head, row): o = a * o + (1 - a) * o_b with a = 1 / (1 + exp(lse_b - lse_a)).
__global__ void MergeTwoKernel(float* o, const float* lse_a, const float* o_b, const float* lse_b, int num_heads,
                               int head_dim, float* lse_out) {
  const int64_t r = int64_t{blockIdx.y} * num_heads + blockIdx.x;
  const float la = lse_a[r], lb = lse_b[r];
  const float m = fmaxf(la, lb);
  const float wa = la == -INFINITY ? 0.0f : expf(la - m), wb = lb == -INFINITY ? 0.0f : expf(lb - m);
  const float total = wa + wb;
  const float ca = total > 0 ? wa / total : 0.0f, cb = total > 0 ? wb / total : 0.0f;
  for (int d = threadIdx.x; d < head_dim; d += kMergeThreads) {
    const int64_t at = r * head_dim + d;
    o[at] = ca * o[at] + cb * o_b[at];
  }
  if (lse_out != nullptr && threadIdx.x == 0) lse_out[r] = total > 0 ? m + logf(total) : -INFINITY;
}

}  // namespace

cudaError_t MergeTwoStatesAsync(float* o, const float* lse_a, const float* o_b, const float* lse_b, int rows,
                                int num_heads, int head_dim, float* lse_out, cudaStream_t stream) {
  MergeTwoKernel<<<dim3(num_heads, rows), kMergeThreads, 0, stream>>>(o, lse_a, o_b, lse_b, num_heads, head_dim,
                                                                       lse_out);
  return cudaGetLastError();
}

cudaError_t MergeStatesAsync(const float* ws_o, const float* ws_lse, int splits, int rows, int num_heads,
                             int head_dim, float* out, float* lse, cudaStream_t stream) {
  MergePartsKernel<<<dim3(num_heads, rows), kMergeThreads, 0, stream>>>(ws_o, ws_lse, splits, num_heads, head_dim,
                                                                         out, lse);
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
