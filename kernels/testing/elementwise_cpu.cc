#include "kernels/testing/elementwise_cpu.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/elementwise/bf16.h"
#include "kernels/elementwise/elementwise_cpu.h"

namespace strata::kernels {

void EmbedBf16(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out) {
  for (int r = 0; r < rows; ++r) {
    const uint16_t* row = table + int64_t{ids[r]} * dim;
    for (int i = 0; i < dim; ++i) out[int64_t{r} * dim + i] = Bf16ToFloat(row[i]);
  }
}

void SwiGluToBf16(const float* gate_up, uint16_t* out, int rows, int ffn) {
  std::vector<float> act(static_cast<size_t>(ffn));
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + int64_t{r} * 2 * ffn;
    SwiGlu(g, g + ffn, act.data(), ffn);
    for (int i = 0; i < ffn; ++i) out[int64_t{r} * ffn + i] = FloatToBf16(act[i]);
  }
}

void GatherRowsBf16(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out) {
  for (int j = 0; j < n; ++j) std::memcpy(out + int64_t{j} * dim, in + int64_t{rows[j]} * dim, sizeof(uint16_t) * dim);
}

}  // namespace strata::kernels
