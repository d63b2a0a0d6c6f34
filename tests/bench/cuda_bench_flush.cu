// The GPU benchmarks' L2 flush (cuda_bench.h): a kernel that reads a buffer larger than the
// L2 and writes nothing, so the lines it leaves are clean. And an empty kernel, the peer of a
// short kernel's launch and drain.
#include <cuda_runtime.h>

#include <cstddef>

namespace strata::bench {
namespace {

__global__ void ReadAllKernel(const float4* __restrict__ p, size_t n, float* sink) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float4 v = __ldcg(p + i);  // cached in L2 with the normal policy: it evicts
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234567.0f) *sink = acc;  // keeps the loads; never true for the zeroed buffer
}

__global__ void EmptyKernel() {}

}  // namespace

cudaError_t EmptyKernelAsync(int blocks, int threads, int smem_bytes, cudaStream_t stream) {
  if (cudaError_t e = cudaFuncSetAttribute(EmptyKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
      e != cudaSuccess) {
    return e;
  }
  EmptyKernel<<<blocks, threads, smem_bytes, stream>>>();
  return cudaGetLastError();
}

cudaError_t ReadFlushAsync(const void* buffer, size_t bytes, float* sink, cudaStream_t stream) {
  ReadAllKernel<<<1024, 512, 0, stream>>>(static_cast<const float4*>(buffer), bytes / sizeof(float4), sink);
  return cudaGetLastError();
}

}  // namespace strata::bench
