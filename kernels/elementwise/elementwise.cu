// Device kernels behind elementwise.h (plain CUDA C++, no Abseil).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_device.cuh"
#include "kernels/alignment.h"
#include "kernels/elementwise/elementwise_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;

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


__global__ void EmbedBf16Kernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ ids, int dim,
                                float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const uint16_t* row = table + static_cast<int64_t>(ids[r]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[r * dim + i] = Widen(row[i]);
}

__global__ void SwiGluToBf16Kernel(const float* __restrict__ gate_up, uint16_t* __restrict__ out, int64_t n, int ffn) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n; idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / ffn, i = idx % ffn;
    const float g = gate_up[r * 2 * ffn + i];
    const float u = gate_up[r * 2 * ffn + ffn + i];
    out[idx] = Narrow(g / (1.0f + expf(-g)) * u);
  }
}

// Four columns a thread, a row per grid row (ffn a multiple of 4 and gate_up 16-byte
// aligned): float4 loads, one 8-byte store, and no division per element. The same
// arithmetic per element as SwiGluToBf16Kernel.
__global__ void SwiGluToBf16X4Kernel(const float* __restrict__ gate_up, uint16_t* __restrict__ out, int ffn) {
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (c >= ffn) return;
  const int64_t r = blockIdx.y;
  const float4 g = *reinterpret_cast<const float4*>(gate_up + r * 2 * ffn + c);
  const float4 u = *reinterpret_cast<const float4*>(gate_up + r * 2 * ffn + ffn + c);
  auto silu_mul = [](float gv, float uv) { return gv / (1.0f + expf(-gv)) * uv; };
  const uint32_t lo = NarrowPair(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
  const uint32_t hi = NarrowPair(silu_mul(g.z, u.z), silu_mul(g.w, u.w));
  uint16_t* dst = out + r * ffn + c;
  if (IsAligned(dst, 8)) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
  } else {
    reinterpret_cast<uint32_t*>(dst)[0] = lo;  // 4-byte aligned: a bf16 row of ffn % 4 == 0 from a 4-byte base
    reinterpret_cast<uint32_t*>(dst)[1] = hi;
  }
}

__global__ void ToBf16Kernel(const float* __restrict__ x, uint16_t* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = Narrow(x[i]);
  }
}

// The rotation of one (i, i + half) pair, as ApplyRope: the one place both the forward
__global__ void GatherRowsBf16Kernel(const uint16_t* __restrict__ in, const int32_t* __restrict__ rows, int dim,
                                     uint16_t* __restrict__ out) {
  const int64_t j = blockIdx.x;
  const uint16_t* src = in + static_cast<int64_t>(rows[j]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[j * dim + i] = src[i];
}

__device__ __forceinline__ uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void FillRandomBf16Kernel(uint16_t* out, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(SplitMix(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull)) >> 40) *
                    (1.0f / 16777216.0f);
    out[i] = Narrow((2.0f * u - 1.0f) * scale);
  }
}

__global__ void FillF32Kernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

}  // namespace

cudaError_t SwiGluAsync(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  SwiGluKernel<<<GridStrideBlocks(n, kThreads, 65535), kThreads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t EmbedAsync(const float* table, const int32_t* ids, int rows, int dim, float* out, cudaStream_t stream) {
  EmbedKernel<<<rows, kThreads, 0, stream>>>(table, ids, dim, out);
  return cudaGetLastError();
}

cudaError_t EmbedBf16Async(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out,
                           cudaStream_t stream) {
  EmbedBf16Kernel<<<rows, kThreads, 0, stream>>>(table, ids, dim, out);
  return cudaGetLastError();
}

cudaError_t SwiGluToBf16Async(const float* gate_up, uint16_t* out, int rows, int ffn, cudaStream_t stream) {
  const int64_t n = int64_t{rows} * ffn;
  if (ffn % 4 == 0 && IsAligned(gate_up, 16) && IsAligned(out, 4) && rows <= 65535) {
    const int quads = ffn / 4;
    SwiGluToBf16X4Kernel<<<dim3((quads + kThreads - 1) / kThreads, rows), kThreads, 0, stream>>>(gate_up, out, ffn);
    return cudaGetLastError();
  }
  SwiGluToBf16Kernel<<<GridStrideBlocks(n, kThreads, 65535 * 8), kThreads, 0, stream>>>(gate_up, out, n, ffn);
  return cudaGetLastError();
}

cudaError_t ToBf16Async(const float* x, uint16_t* out, int64_t n, cudaStream_t stream) {
  ToBf16Kernel<<<GridStrideBlocks(n, kThreads, 65535 * 8), kThreads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}

cudaError_t GatherRowsBf16Async(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out,
                                cudaStream_t stream) {
  GatherRowsBf16Kernel<<<n, kThreads, 0, stream>>>(in, rows, dim, out);
  return cudaGetLastError();
}

cudaError_t FillRandomBf16Async(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  FillRandomBf16Kernel<<<GridStrideBlocks(n, kThreads, 65535 * 8), kThreads, 0, stream>>>(out, n, seed, scale);
  return cudaGetLastError();
}

cudaError_t FillF32Async(float* out, int64_t n, float value, cudaStream_t stream) {
  FillF32Kernel<<<GridStrideBlocks(n, kThreads, 65535 * 8), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}


}  // namespace strata::kernels::internal
