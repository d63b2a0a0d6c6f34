// Shared-memory barriers (PTX mbarrier) for the warp-specialised kernels: a barrier counts
// arrivals, and each time the expected count arrives it completes a phase; a waiter names
// the phase it needs by its parity. Plain CUDA C++, device code only; try_wait needs sm_90,
// so compile only in a translation unit built for sm_90a (prefill_wgmma_ws.cu).
#ifndef STRATA_KERNELS_ATTENTION_MBARRIER_CUH_
#define STRATA_KERNELS_ATTENTION_MBARRIER_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::internal::mbarrier {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread initialises; a barrier (__syncthreads) before any other thread uses it.
__device__ __forceinline__ void Init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddress(bar)), "r"(count) : "memory");
}

// This thread's arrival, releasing its earlier writes to whoever waits for the phase.
__device__ __forceinline__ void Arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddress(bar)) : "memory");
}

// Until the phase of the given parity has completed (acquiring the arrivals' writes).
__device__ __forceinline__ void Wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "waiting:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra waiting;\n"
      "}\n" ::"r"(SmemAddress(bar)),
      "r"(parity)
      : "memory");
}

// The warps of a named barrier (ids 1..15; 0 is __syncthreads'), `threads` of them in all.
__device__ __forceinline__ void NamedSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace strata::kernels::internal::mbarrier

#endif  // STRATA_KERNELS_ATTENTION_MBARRIER_CUH_
