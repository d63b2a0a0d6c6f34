// Device kernels behind norm.h (plain CUDA C++, no Abseil).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_device.cuh"
#include "kernels/norm/norm_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;  // a multiple of 32: BlockSum shuffles full warps

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

// One warp per (head, row): the head's values strided over the lanes, summed by shuffles.
// Each lane writes back only what it read.
__global__ void HeadRmsNormKernel(float* x, int64_t row_stride, int q_heads, int heads, int head_dim,
                                  const float* __restrict__ q_weight, const float* __restrict__ k_weight, float eps) {
  const int head = blockIdx.y * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (head >= heads) return;  // a whole warp leaves together
  float* v = x + int64_t{blockIdx.x} * row_stride + int64_t{head} * head_dim;
  const float* w = head < q_heads ? q_weight : k_weight;
  float ss = 0.0f;
  for (int i = lane; i < head_dim; i += 32) ss += v[i] * v[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(head_dim) + eps);
  for (int i = lane; i < head_dim; i += 32) v[i] = (v[i] * inv) * w[i];
}

// One block per row: residual += x, then y = RmsNorm(residual). Each element is updated
// by the thread that later normalises it, and the whole row is summed before BlockSum's
// barrier, so y may alias x.
__global__ void AddRmsNormKernel(const float* x, float* residual, const float* __restrict__ weight, float* y, int dim,
                                 float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    const float v = residual[base + i] + x[base + i];
    residual[base + i] = v;
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += kThreads) y[base + i] = (residual[base + i] * inv) * weight[i];
}

// One block per row, each thread's kPerThread elements (i = thread + k * blockDim.x) held
// in registers: every load of the row is issued before the first store, and the row is
// read once (the looping form below waits out a load per element, since its stores to x
// may alias its next loads: 8 us for a 64-row decode step on the H100). The same sums in
// the same order as the looping form, so the two agree bit for bit.
template <int kPerThread>
__global__ void RmsNormToBf16RegistersKernel(const float* __restrict__ add, float* x, const float* __restrict__ weight,
                                             uint16_t* __restrict__ y, int dim, float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    v[k] = 0.0f;
    if (i < dim) v[k] = add != nullptr ? x[base + i] + add[base + i] : x[base + i];
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) {
      if (add != nullptr) x[base + i] = v[k];
      ss += v[k] * v[k];
    }
  }
  const float mean = BlockSum(ss) / static_cast<float>(dim);
  const float inv = 1.0f / sqrtf(mean + eps);
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < dim) y[base + i] = Narrow((v[k] * inv) * weight[i]);
  }
}

// One block per row, any dim. Each thread reads back only the elements it wrote itself.
__global__ void RmsNormToBf16Kernel(const float* __restrict__ add, float* x, const float* __restrict__ weight,
                                    uint16_t* __restrict__ y, int dim, float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = x[base + i];
    if (add != nullptr) {
      v += add[base + i];
      x[base + i] = v;
    }
    ss += v * v;
  }
  const float mean = BlockSum(ss) / static_cast<float>(dim);
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) y[base + i] = Narrow((x[base + i] * inv) * weight[i]);
}

}  // namespace

cudaError_t HeadRmsNormAsync(float* x, int rows, int64_t row_stride, int q_heads, int k_heads, int head_dim,
                            const float* q_weight, const float* k_weight, float eps, cudaStream_t stream) {
  constexpr int kWarps = 4;
  const int heads = q_heads + k_heads;
  HeadRmsNormKernel<<<dim3(rows, (heads + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
      x, row_stride, q_heads, heads, head_dim, q_weight, k_weight, eps);
  return cudaGetLastError();
}

cudaError_t RmsNormAsync(const float* x, const float* weight, float* y, int rows, int dim,
                         float eps, cudaStream_t stream) {
  RmsNormKernel<<<rows, kThreads, 0, stream>>>(x, weight, y, dim, eps);
  return cudaGetLastError();
}

cudaError_t AddRmsNormAsync(const float* x, float* residual, const float* weight, float* y, int rows, int dim,
                            float eps, cudaStream_t stream) {
  AddRmsNormKernel<<<rows, kThreads, 0, stream>>>(x, residual, weight, y, dim, eps);
  return cudaGetLastError();
}

cudaError_t RmsNormToBf16Async(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim,
                               float eps, cudaStream_t stream) {
  const int threads = dim >= 2048 ? 512 : kThreads, per_thread = (dim + threads - 1) / threads;
  if (per_thread <= 4) {
    RmsNormToBf16RegistersKernel<4><<<rows, threads, 0, stream>>>(add, x, weight, y, dim, eps);
  } else if (per_thread <= 8) {
    RmsNormToBf16RegistersKernel<8><<<rows, threads, 0, stream>>>(add, x, weight, y, dim, eps);
  } else if (per_thread <= 16) {
    RmsNormToBf16RegistersKernel<16><<<rows, threads, 0, stream>>>(add, x, weight, y, dim, eps);
  } else {
    RmsNormToBf16Kernel<<<rows, threads, 0, stream>>>(add, x, weight, y, dim, eps);
  }
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
