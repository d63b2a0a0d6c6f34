// The CPU twins' determinism contract, and the dot product that implements it (for the
// kernels' own *_cpu.cc files; internal).
//
// The fp32 CPU kernels (norm/norm_cpu.h, rope/rope_cpu.h, attention/attention_cpu.h,
// gemm/gemm_cpu.h, elementwise/elementwise_cpu.h, sampling/sampling_cpu.h) are the
// specification every other implementation (CUDA, bf16) is checked against, and the kernels
// the CPU engine runs.
//
// Determinism contract. Every output element is computed from its own inputs only, by the
// same sequence of IEEE float operations whatever else is in the call: the number of rows or
// queries, the row's index, how a run of queries is split across calls. So a token's K/V and
// logits computed during decode (one row at a time) are bit-identical to the same token
// computed inside a large prefill, and cached and recomputed answers agree token for token.
// Concretely:
//   - A dot product over n elements (MatMulWT, the scores of Attention) keeps 16 partial
//     sums: lane l accumulates x[k]*w[k] for k = l, l+16, ... below n rounded down to 16, in
//     increasing k, as a rounded multiply followed by a rounded add (never fused). The lanes
//     are reduced pairwise, lane l += lane l+8, then l += l+4, l += l+2, l += l+1, and the
//     remaining n % 16 products are added one at a time in increasing k.
//   - RmsNorm's sum of squares uses the same pattern with w = x.
//   - Attention sums over keys in increasing key order (see Attention).
// The library is compiled with -ffp-contract=off; the vector width a CPU offers changes the
// speed only, never the result (exp, log, sin and cos come from the C library: results are
// the same bits across machines that share it). No CPU kernel allocates per element, takes
// locks or keeps state: all are safe to call from several threads on disjoint outputs.
//
// Preconditions of every CPU kernel (violating one is undefined behaviour; these are
// hot-path kernels with no error channel): pointers are non-null where a value is read or
// written, sizes are >= 0, buffers hold the sizes stated, and outputs do not overlap inputs
// except where stated.
#ifndef STRATA_KERNELS_CPU_DOT_H_
#define STRATA_KERNELS_CPU_DOT_H_

#include <cstdint>
#include <cstring>

namespace strata::kernels::internal {


// The 16 partial sums of a dot product: lane l takes k = 16b + l. GCC/Clang vector
// extensions are element-wise IEEE operations, so the code below means exactly the lane
// pattern of the header whatever instructions a target lowers it to (4, 8 or 16 floats
// wide); with -ffp-contract=off a multiply and an add are never fused. Two representations
// of the same 16 lanes: Lanes16 (one 64-byte vector; native on AVX-512) and Lanes8x2 (two
// 32-byte halves; native on AVX2, split in two again by SSE).
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

#define STRATA_INLINE inline __attribute__((always_inline))

// On x86 the hot loops are built for AVX2 and for the baseline, picked at load time, and
// MatMulWT has an AVX-512 variant. The results are the same bits on every path.
// Not under ThreadSanitizer: an ifunc resolver runs before the TSan runtime is set up, and
// the instrumented resolver crashes the program at load.
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define STRATA_X86 1
#define STRATA_MULTIVERSIONED __attribute__((target_clones("avx2", "default")))
#else
#define STRATA_X86 0
#define STRATA_MULTIVERSIONED
#endif

template <typename V>
STRATA_INLINE V LoadV(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

struct Lanes16 {
  V16 v;
  static STRATA_INLINE Lanes16 Zero() { return {V16{}}; }
  static STRATA_INLINE Lanes16 Load(const float* p) { return {LoadV<V16>(p)}; }
  // this += x * w, lane by lane.
  STRATA_INLINE void AddProduct(const Lanes16& x, const Lanes16& w) { v += x.v * w.v; }
  // Lane l + lane l+8, for l < 8.
  STRATA_INLINE V8 Fold() const {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
           __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  }
};

struct Lanes8x2 {
  V8 lo, hi;
  static STRATA_INLINE Lanes8x2 Zero() { return {V8{}, V8{}}; }
  static STRATA_INLINE Lanes8x2 Load(const float* p) { return {LoadV<V8>(p), LoadV<V8>(p + 8)}; }
  STRATA_INLINE void AddProduct(const Lanes8x2& x, const Lanes8x2& w) {
    lo += x.lo * w.lo;
    hi += x.hi * w.hi;
  }
  STRATA_INLINE V8 Fold() const { return lo + hi; }
};

// Finishes one dot product: reduces the 16 lanes in the fixed order of the header, then adds
// the tail products x[k]*w[k], k in [n16, n), one at a time.
template <typename L>
STRATA_INLINE float FinishDot(const L& lanes, const float* x, const float* w, int n16, int n) {
  const V8 a = lanes.Fold();
  const float b0 = a[0] + a[4], b1 = a[1] + a[5], b2 = a[2] + a[6], b3 = a[3] + a[7];
  const float c0 = b0 + b2, c1 = b1 + b3;
  float s = c0 + c1;
  for (int k = n16; k < n; ++k) s += x[k] * w[k];
  return s;
}

// Dot products of R vectors xs[r] with C vectors ws[c], all of length n, sharing loads:
// sums[r * C + c] = dot(xs[r], ws[c]). Each dot is computed by exactly the operations of
// the 1x1 case, so neither the tile shape nor the lane representation changes a result.
template <typename L, int R, int C>
STRATA_INLINE void DotTile(const float* const* xs, const float* const* ws, int n, float* sums) {
  L acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = L::Zero();
  }
  const int n16 = n & ~15;
  for (int k = 0; k < n16; k += 16) {
    L x[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) x[r] = L::Load(xs[r] + k);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const L w = L::Load(ws[c] + k);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c].AddProduct(x[r], w);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) sums[r * C + c] = FinishDot(acc[r][c], xs[r], ws[c], n16, n);
  }
}

STRATA_INLINE float Dot(const float* x, const float* w, int n) {
  float s;
  DotTile<Lanes8x2, 1, 1>(&x, &w, n, &s);
  return s;
}


}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_CPU_DOT_H_
