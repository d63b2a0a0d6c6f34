// Device helpers shared by the .cu files (plain CUDA C++, device code only): asynchronous
// 16-byte copies to shared memory, the fast base-2 exponential, bf16 conversions and
// block-wide reductions, and the grid size of grid-stride loops.
#ifndef STRATA_KERNELS_CUDA_DEVICE_CUH_
#define STRATA_KERNELS_CUDA_DEVICE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

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

// bf16 (stored as uint16_t) <-> fp32, as Bf16ToFloat / FloatToBf16 in elementwise/bf16.cc:
// widening is exact; narrowing rounds to nearest, ties to even, and keeps NaN a NaN.
__device__ __forceinline__ float Widen(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
__device__ __forceinline__ uint16_t Narrow(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// Two values narrowed into one 32-bit word, lo in the low half (memory order).
__device__ __forceinline__ uint32_t NarrowPair(float lo, float hi) {
  return Narrow(lo) | (static_cast<uint32_t>(Narrow(hi)) << 16);
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// Reduces v over the block (blockDim a multiple of 32, at most 1024) with op, whose
// identity is `identity`; every thread gets the result. Ends with a barrier, so it may be
// called again at once; every thread of the block must call it.
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  return v;
}

__device__ __forceinline__ float BlockSum(float v) { return BlockReduce(v, SumOp{}, 0.0f); }

// Blocks of `threads` for a grid-stride loop over n elements: enough for one element a
// thread, at most max_blocks.
inline unsigned GridStrideBlocks(int64_t n, int threads, int64_t max_blocks) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks);
}

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_CUDA_DEVICE_CUH_
