// CPU twins, for tests only, of the bf16 elementwise kernels in
// kernels/elementwise/elementwise.h. Preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_TESTING_ELEMENTWISE_CPU_H_
#define STRATA_KERNELS_TESTING_ELEMENTWISE_CPU_H_

#include <cstdint>

namespace strata::kernels {

// out[r] = widen(table[ids[r]]): rows of dim values, bf16 table, fp32 out.
void EmbedBf16(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out);

// gate_up: [rows][2 * ffn] fp32 (gate in columns [0, ffn), up in [ffn, 2 ffn));
// out[r][i] = bf16(silu(gate) * up) as SwiGlu in elementwise/elementwise_cpu.h.
void SwiGluToBf16(const float* gate_up, uint16_t* out, int rows, int ffn);

// out[j] = in[rows[j]] for j < n: rows of dim bf16 values.
void GatherRowsBf16(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_TESTING_ELEMENTWISE_CPU_H_
