#include "kernels/gemm/gemm_cpu.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cpu_dot.h"

namespace strata::kernels {
namespace {

using internal::DotTile;
using internal::Lanes16;
using internal::Lanes8x2;

// out[r][j] for rows [r0, r0 + R) and outputs [j0, j0 + C).
template <typename L, int R, int C>
STRATA_INLINE void MatMulTile(const float* x, const float* w, const float* bias, float* out, int r0,
                              int j0, int in_dim, int out_dim) {
  const float* xs[R];
  const float* ws[C];
  for (int r = 0; r < R; ++r) xs[r] = x + static_cast<int64_t>(r0 + r) * in_dim;
  for (int c = 0; c < C; ++c) ws[c] = w + static_cast<int64_t>(j0 + c) * in_dim;
  float sums[R * C];
  DotTile<L, R, C>(xs, ws, in_dim, sums);
  for (int r = 0; r < R; ++r) {
    float* o = out + static_cast<int64_t>(r0 + r) * out_dim + j0;
    for (int c = 0; c < C; ++c) {
      o[c] = bias != nullptr ? sums[r * C + c] + bias[j0 + c] : sums[r * C + c];
    }
  }
}

// Rows processed against one block of weights before moving on, so that their x rows stay
// in cache while every output block streams past them.
constexpr int64_t kRowChunkFloats = 32 * 1024;

// Tiles of R rows x C outputs; the row remainder uses 1 x C, the column remainder 1 x 1.
template <typename L, int R, int C>
STRATA_INLINE void MatMulTiled(const float* x, const float* w, const float* bias, float* out,
                               int rows, int in_dim, int out_dim) {
  const int chunk_rows =
      static_cast<int>(std::max<int64_t>(R, kRowChunkFloats / std::max(in_dim, 1)));
  for (int rc = 0; rc < rows; rc += chunk_rows) {
    const int rend = std::min(rows, rc + chunk_rows);
    int j = 0;
    for (; j + C <= out_dim; j += C) {
      int r = rc;
      for (; r + R <= rend; r += R) MatMulTile<L, R, C>(x, w, bias, out, r, j, in_dim, out_dim);
      for (; r < rend; ++r) MatMulTile<L, 1, C>(x, w, bias, out, r, j, in_dim, out_dim);
    }
    for (; j < out_dim; ++j) {
      for (int r = rc; r < rend; ++r) MatMulTile<L, 1, 1>(x, w, bias, out, r, j, in_dim, out_dim);
    }
  }
}

#if STRATA_X86
// AVX-512 has 32 vector registers: a 4x4 tile keeps 16 accumulators and the shared loads.
__attribute__((target("avx512f"))) void MatMulWTAvx512(const float* x, const float* w,
                                                       const float* bias, float* out, int rows,
                                                       int in_dim, int out_dim) {
  MatMulTiled<Lanes16, 4, 4>(x, w, bias, out, rows, in_dim, out_dim);
}
#endif

// AVX2 has 16: one row against four outputs (eight accumulator registers) measured faster
// than 2x2, which runs out of registers for the shared loads.
STRATA_MULTIVERSIONED void MatMulWTGeneric(const float* x, const float* w, const float* bias,
                                           float* out, int rows, int in_dim, int out_dim) {
  MatMulTiled<Lanes8x2, 1, 4>(x, w, bias, out, rows, in_dim, out_dim);
}

// One (query, head) of Attention: see the header for the operation sequence. scores has room
// for n_keys floats, acc for head_dim. kHeadDim > 0 fixes head_dim at compile time so that
}  // namespace

void MatMulWT(const float* x, const float* w, const float* bias, float* out, int rows, int in_dim,
              int out_dim) {
#if STRATA_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return MatMulWTAvx512(x, w, bias, out, rows, in_dim, out_dim);
#endif
  MatMulWTGeneric(x, w, bias, out, rows, in_dim, out_dim);
}

}  // namespace strata::kernels
