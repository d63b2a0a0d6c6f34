// Device kernels behind cuda_kernels.h. Plain CUDA C++ (no Abseil): launches return
// cudaError_t and cuda_kernels.cc turns them into absl::Status.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;  // a multiple of 32: BlockSum shuffles full warps
constexpr int64_t kMaxBlocks = 65535;

int64_t BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

// Sum of v over the block, returned to every thread.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One block per row. x and y may alias: each element is read before it is written, by the
// same thread, and the whole row is read before BlockSum's barrier.
__global__ void RmsNormKernel(const float* x, const float* __restrict__ weight, float* y, int dim,
                              float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    const float v = x[base + i];
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += kThreads) y[base + i] = (x[base + i] * inv) * weight[i];
}

__global__ void SwiGluKernel(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// One block per row.
__global__ void EmbedKernel(const float* __restrict__ table, const int32_t* __restrict__ ids,
                            int dim, float* __restrict__ out) {
  const float* src = table + static_cast<int64_t>(ids[blockIdx.x]) * dim;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) dst[i] = src[i];
}

// One thread per (row, head, i < half) pair.
__global__ void ApplyRopeKernel(float* x, const int32_t* __restrict__ positions, int64_t pairs,
                                int heads, int head_dim, const float* __restrict__ inv_freq) {
  const int half = head_dim / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < pairs;
       p += stride) {
    const int i = static_cast<int>(p % half);
    const int64_t row_head = p / half;
    const int64_t row = row_head / heads;
    const float angle = static_cast<float>(positions[row]) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    float* xh = x + row_head * head_dim;
    const float a = xh[i], b = xh[i + half];
    xh[i] = a * c - b * s;
    xh[i + half] = b * c + a * s;
  }
}

}  // namespace

cudaError_t RmsNormAsync(const float* x, const float* weight, float* y, int rows, int dim,
                         float eps, cudaStream_t stream) {
  RmsNormKernel<<<rows, kThreads, 0, stream>>>(x, weight, y, dim, eps);
  return cudaGetLastError();
}

cudaError_t SwiGluAsync(const float* gate, const float* up, float* out, int64_t n,
                        cudaStream_t stream) {
  SwiGluKernel<<<static_cast<unsigned>(BlocksFor(n)), kThreads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t EmbedAsync(const float* table, const int32_t* ids, int rows, int dim, float* out,
                       cudaStream_t stream) {
  EmbedKernel<<<rows, kThreads, 0, stream>>>(table, ids, dim, out);
  return cudaGetLastError();
}

cudaError_t ApplyRopeAsync(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                           const float* inv_freq, cudaStream_t stream) {
  const int64_t pairs = static_cast<int64_t>(rows) * heads * (head_dim / 2);
  ApplyRopeKernel<<<static_cast<unsigned>(BlocksFor(pairs)), kThreads, 0, stream>>>(
      x, positions, pairs, heads, head_dim, inv_freq);
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
