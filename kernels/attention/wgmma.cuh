// Hopper's warpgroup matrix products (PTX wgmma, sm_90a only) for the attention kernels:
// shared-memory descriptors, the fences and group waits, and the bf16 products the kernels
// use. Plain CUDA C++, device code only; compile only in a translation unit built for
// sm_90a (prefill_wgmma_ws.cu).
//
// Layout. Operand tiles are in the 128-byte swizzle layout (DescSw128): rows of 128 bytes
// whose 16-byte chunks are permuted by the row's index mod 8, in 1024-byte atoms of 8 rows
// (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix Layout"; the unswizzled
// core-matrix layout was measured 30% slower: whole rows of the pages then cannot be copied
// by neighbouring threads without bank conflicts). A K-major tile's rows are M/N rows
// running along K (the reduced dimension); an MN-major tile's rows are K rows running along
// M/N.
//
// Accumulators: a 64 x N fp32 product is N / 2 floats a thread; warp w of the warpgroup
// holds rows 16w..16w+15 as mma.sync m16n8's accumulator does, repeated over the N / 8
// column blocks: d[4j + e] is row 16w + lane / 4 + 8 (e / 2), column 8j + 2 (lane % 4) + e % 2.
// A from registers takes the m16n8k16 A fragment of the warp's 16 rows.
#ifndef STRATA_KERNELS_ATTENTION_WGMMA_CUH_
#define STRATA_KERNELS_ATTENTION_WGMMA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::internal::wgmma {

// The descriptor of a tile in the 128-byte swizzle layout: rows of 128 bytes (64 bf16) whose
// 16-byte chunk c sits at c ^ (row % 8), in atoms of 8 rows (1024 bytes, 1024-byte
// aligned). K-major: start at the atom's row 0 plus the k-step's byte offset in the row, SBO
// the step between 8-row groups (LBO unused); MN-major: LBO the step between 64-element
// column blocks, SBO between 8-row groups along K. Offsets in bytes, multiples of 16.
__device__ __forceinline__ uint64_t DescSw128(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((at & 0x3ffffu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}

// Before a product reads registers or shared memory written since the last one.
__device__ __forceinline__ void Fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Makes this thread's generic-proxy writes to shared memory (stores, cp.async) visible to
// the products, which read through the async proxy; then a barrier.
__device__ __forceinline__ void FenceSharedForAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void Commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The accumulators are register operands of the asm, which the compiler takes as done when
// the asm returns: a group is committed and waited for (Wait<0>) before they are read, and
// PinOperands before Fence() and after Wait() keeps the compiler from moving them across
// either while a product is in flight.
template <int N>
__device__ __forceinline__ void PinOperands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// d (64 x 64) = A (smem, K-major) * B (smem, K-major) + (accumulate ? d : 0).
__device__ __forceinline__ void WgmmaSS64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (64 x 64) = A (registers) * B (smem, MN-major) + (accumulate ? d : 0).
__device__ __forceinline__ void WgmmaRS64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                          int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// d (64 x 128) = A (registers) * B (smem, MN-major) + (accumulate ? d : 0).
__device__ __forceinline__ void WgmmaRS128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                          int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

}  // namespace strata::kernels::internal::wgmma

#endif  // STRATA_KERNELS_ATTENTION_WGMMA_CUH_
