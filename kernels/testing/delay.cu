#include "kernels/testing/delay.h"

#include "kernels/dependent_launch.cuh"

namespace strata::kernels::testing {
namespace {

__device__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void Spin(uint64_t ns) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < ns) __nanosleep(1000);
}

__global__ void DelayKernel(uint64_t ns) { Spin(ns); }

__global__ void DelayThenWriteKernel(uint64_t ns, int* cell, int value) {
  internal::AllowDependentLaunch();
  Spin(ns);
  *cell = value;
}

__global__ void CopyIntKernel(const int* from, int* to) { *to = *reinterpret_cast<const volatile int*>(from); }

}  // namespace

cudaError_t LaunchDelayThenWrite(cudaStream_t stream, int64_t microseconds, int* cell, int value) {
  DelayThenWriteKernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds) * 1000, cell, value);
  return cudaGetLastError();
}

cudaError_t LaunchCopyInt(cudaStream_t stream, const int* from, int* to, bool dependent) {
  return internal::LaunchKernel(CopyIntKernel, dim3(1), dim3(1), 0, stream, dependent, from, to);
}

cudaError_t LaunchDelay(cudaStream_t stream, int64_t microseconds) {
  DelayKernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds) * 1000);
  return cudaGetLastError();
}

}  // namespace strata::kernels::testing
