// Device helpers shared by the .cu files (plain CUDA C++, device code only): asynchronous
// 16-byte copies to shared memory and the fast base-2 exponential.
#ifndef STRATA_KERNELS_CUDA_DEVICE_CUH_
#define STRATA_KERNELS_CUDA_DEVICE_CUH_

#include <cuda_runtime.h>

namespace strata::kernels::internal {

// cp.async of 16 bytes global -> shared; with valid false it reads nothing and writes
// zeros (so a masked key's K and V rows are 0, never NaN bits that 0 * x would spread).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ float FastExp2(float x) {  // exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_CUDA_DEVICE_CUH_
