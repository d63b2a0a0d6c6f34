// CPU SwiGLU and embedding lookup: the specification of elementwise/elementwise.h's device
// kernels, and what the CPU engine runs. Preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_CPU_H_
#define STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_CPU_H_

#include <cstdint>

namespace strata::kernels {

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may be gate or up.
void SwiGlu(const float* gate, const float* up, float* out, int64_t n);

// out[r] = table[ids[r]]: copies rows of dim floats. Every id must be a valid row of table.
void Embed(const float* table, const int32_t* ids, int rows, int dim, float* out);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ELEMENTWISE_ELEMENTWISE_CPU_H_
