// Whether a pointer sits on a byte boundary: the one check behind the kernels' vector
// loads and stores (float2, float4, 16-byte cp.async), for the launch code in .cc and .cu
// files and device code alike. Plain C++ (no Abseil), so nvcc may parse it.
#ifndef STRATA_KERNELS_ALIGNMENT_H_
#define STRATA_KERNELS_ALIGNMENT_H_

#include <cstddef>
#include <cstdint>

namespace strata::kernels::internal {

#if defined(__CUDACC__)
__host__ __device__
#endif
inline bool IsAligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ALIGNMENT_H_
