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

// One block per row. Each thread reads back only the elements it wrote itself.
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
  RmsNormToBf16Kernel<<<rows, dim >= 2048 ? 512 : kThreads, 0, stream>>>(add, x, weight, y, dim, eps);
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
