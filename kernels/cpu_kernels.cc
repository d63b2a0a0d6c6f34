#include "kernels/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

namespace strata::kernels {
namespace {

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
// the value accumulator stays in registers; 0 takes it from head_dim.
template <int kHeadDim>
STRATA_INLINE void AttendOne(const float* q, const float* k, const float* v, int64_t stride,
                             int n_keys, int head_dim, float scale, float* scores, float* acc,
                             float* out, float* lse) {
  if constexpr (kHeadDim > 0) head_dim = kHeadDim;
  int t = 0;
  // Four keys at a time share the loads of q; each score is still its own 1x1 dot.
  for (; t + 4 <= n_keys; t += 4) {
    const float* ks[4] = {k + t * stride, k + (t + 1) * stride, k + (t + 2) * stride,
                          k + (t + 3) * stride};
    DotTile<Lanes8x2, 1, 4>(&q, ks, head_dim, scores + t);
  }
  for (; t < n_keys; ++t) scores[t] = Dot(q, k + t * stride, head_dim);
  float m = -std::numeric_limits<float>::infinity();
  for (t = 0; t < n_keys; ++t) {
    scores[t] *= scale;
    m = std::max(m, scores[t]);
  }
  float sum = 0;
  for (t = 0; t < n_keys; ++t) {
    scores[t] = std::exp(scores[t] - m);
    sum += scores[t];
  }
  if constexpr (kHeadDim > 0) {
    V8 a[kHeadDim / 8] = {};
    for (t = 0; t < n_keys; ++t) {
      const float s = scores[t];
      const V8 e = {s, s, s, s, s, s, s, s};
      const float* vt = v + t * stride;
#pragma GCC unroll 16
      for (int d = 0; d < kHeadDim / 8; ++d) a[d] += e * LoadV<V8>(vt + 8 * d);
    }
    std::memcpy(acc, a, sizeof(a));
  } else {
    std::fill(acc, acc + head_dim, 0.0f);
    for (t = 0; t < n_keys; ++t) {
      const float e = scores[t];
      const float* vt = v + t * stride;
      for (int d = 0; d < head_dim; ++d) acc[d] += e * vt[d];
    }
  }
  for (int d = 0; d < head_dim; ++d) out[d] = acc[d] / sum;
  if (lse != nullptr) *lse = m + std::log(sum);
}

// Attention for queries [0, p.num_queries); scratch holds the scores and the accumulator.
template <int kHeadDim>
STRATA_INLINE void AttentionQueries(const AttentionParams& p, float* scores, float* acc) {
  const int group = p.num_heads / p.num_kv_heads;
  for (int i = 0; i < p.num_queries; ++i) {
    const int n_keys = p.first_query_pos + i + 1;
    for (int h = 0; h < p.num_heads; ++h) {
      const int64_t qo = (static_cast<int64_t>(i) * p.num_heads + h) * p.head_dim;
      const int64_t kvo = static_cast<int64_t>(h / group) * p.head_dim;
      float* lse = p.lse != nullptr ? p.lse + static_cast<int64_t>(i) * p.num_heads + h : nullptr;
      AttendOne<kHeadDim>(p.q + qo, p.k + kvo, p.v + kvo, p.kv_row_stride, n_keys, p.head_dim,
                          p.scale, scores, acc, p.out + qo, lse);
    }
  }
}

STRATA_MULTIVERSIONED void AttentionImpl(const AttentionParams& p, float* scores, float* acc) {
  switch (p.head_dim) {
    case 64:
      return AttentionQueries<64>(p, scores, acc);
    case 128:
      return AttentionQueries<128>(p, scores, acc);
    default:
      return AttentionQueries<0>(p, scores, acc);
  }
}

}  // namespace

void RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    float* yr = y + static_cast<int64_t>(r) * dim;
    const float mean = Dot(xr, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * weight[i];
  }
}

void AddRmsNorm(const float* x, float* residual, const float* weight, float* y, int rows, int dim, float eps) {
  const int64_t n = int64_t{rows} * dim;
  for (int64_t i = 0; i < n; ++i) residual[i] += x[i];
  RmsNorm(residual, weight, y, rows, dim, eps);
}

void MatMulWT(const float* x, const float* w, const float* bias, float* out, int rows, int in_dim,
              int out_dim) {
#if STRATA_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return MatMulWTAvx512(x, w, bias, out, rows, in_dim, out_dim);
#endif
  MatMulWTGeneric(x, w, bias, out, rows, in_dim, out_dim);
}

void ApplyRope(float* x, const int32_t* positions, int rows, int heads, int head_dim,
               const float* inv_freq) {
  const int half = head_dim / 2;
  std::vector<float> cos_sin(2 * static_cast<size_t>(half));
  float* cs = cos_sin.data();
  float* sn = cs + half;
  for (int r = 0; r < rows; ++r) {
    const float pos = static_cast<float>(positions[r]);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
    }
    for (int h = 0; h < heads; ++h) {
      float* xh = x + (static_cast<int64_t>(r) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = xh[i], b = xh[i + half];
        xh[i] = a * cs[i] - b * sn[i];
        xh[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

std::vector<float> RopeInvFreq(int head_dim, float theta, const RopeScaling& scaling) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  if (!scaling.llama3) return inv_freq;
  const float old_len = static_cast<float>(scaling.original_max_position);
  const float low_freq_wavelen = old_len / scaling.low_freq_factor;
  const float high_freq_wavelen = old_len / scaling.high_freq_factor;
  for (float& f : inv_freq) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f = f / scaling.factor;
      continue;
    }
    const float smooth = (old_len / wavelen - scaling.low_freq_factor) /
                         (scaling.high_freq_factor - scaling.low_freq_factor);
    f = (1 - smooth) * f / scaling.factor + smooth * f;
  }
  return inv_freq;
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void Embed(const float* table, const int32_t* ids, int rows, int dim, float* out) {
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  for (int r = 0; r < rows; ++r) {
    std::memcpy(out + static_cast<int64_t>(r) * dim, table + static_cast<int64_t>(ids[r]) * dim,
                row_bytes);
  }
}

void Attention(const AttentionParams& p) {
  if (p.num_queries <= 0) return;
  std::vector<float> scratch(static_cast<size_t>(p.first_query_pos) + p.num_queries + p.head_dim);
  AttentionImpl(p, scratch.data(), scratch.data() + p.first_query_pos + p.num_queries);
}

void MergeAttentionStates(const float* o1, const float* lse1, const float* o2, const float* lse2,
                          float* o, float* lse, int rows, int heads, int head_dim) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t n = static_cast<int64_t>(rows) * heads;
  for (int64_t s = 0; s < n; ++s) {
    const float l1 = lse1[s], l2 = lse2[s];
    const int64_t base = s * head_dim;
    if (l1 == kNegInf && l2 == kNegInf) {
      std::fill(o + base, o + base + head_dim, 0.0f);
      lse[s] = kNegInf;
      continue;
    }
    const float m = std::max(l1, l2);
    const float a1 = std::exp(l1 - m), a2 = std::exp(l2 - m);
    const float denom = a1 + a2;
    for (int d = 0; d < head_dim; ++d) {
      o[base + d] = (o1[base + d] * a1 + o2[base + d] * a2) / denom;
    }
    lse[s] = m + std::log(denom);
  }
}

namespace {

int32_t Argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

}  // namespace

int32_t SampleToken(const float* logits, int vocab, float temperature, float top_p, double u) {
  if (temperature <= 0) return Argmax(logits, vocab);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  double m = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]) * inv_t);
  std::vector<double> probs(static_cast<size_t>(vocab));
  double total = 0;
  for (int i = 0; i < vocab; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[i]) * inv_t - m);
    total += probs[i];
  }
  if (!(top_p > 0 && top_p < 1)) {
    const double target = u * total;
    double cum = 0;
    int32_t last = 0;
    for (int i = 0; i < vocab; ++i) {
      if (probs[i] <= 0) continue;
      last = i;
      cum += probs[i];
      if (target < cum) return i;
    }
    return last;  // u * total rounded up past the sum
  }
  // Nucleus: find the most probable tokens by growing a sorted prefix (most vocabularies keep
  // a few dozen tokens), ordered by probability, then index.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) order[i] = i;
  const auto more_probable = [&probs](int32_t a, int32_t b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  };
  const double need = static_cast<double>(top_p) * total;
  int kept = 0;
  double mass = 0;
  for (int64_t prefix = 64;; prefix *= 4) {
    const auto end = order.begin() + std::min<int64_t>(prefix, vocab);
    std::partial_sort(order.begin() + kept, end, order.end(), more_probable);
    const int sorted = static_cast<int>(end - order.begin());
    while (kept < sorted && mass < need) mass += probs[order[kept++]];
    if (mass >= need || sorted == vocab) break;
  }
  const double target = u * mass;
  double cum = 0;
  for (int i = 0; i < kept; ++i) {
    cum += probs[order[i]];
    if (target < cum) return order[i];
  }
  return order[kept - 1];
}

float Bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);  // to nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void PlaceKvPaged(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots, int n,
                  int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages, uint16_t* v_pages) {
  const int64_t row = int64_t{kv_heads} * head_dim;
  std::vector<float> k(k_raw, k_raw + n * row);
  ApplyRope(k.data(), positions, n, kv_heads, head_dim, inv_freq);
  for (int i = 0; i < n; ++i) {
    for (int64_t j = 0; j < row; ++j) {
      k_pages[slots[i] * row + j] = FloatToBf16(k[i * row + j]);
      v_pages[slots[i] * row + j] = FloatToBf16(v[i * row + j]);
    }
  }
}

int64_t PagedSequenceLength(const PagedKv& kv, int b) {
  const int64_t pages = kv.indptr[b + 1] - kv.indptr[b];
  return pages == 0 ? 0 : (pages - 1) * kv.page_size + kv.last_page_len[b];
}

void PagedPrefillAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch, int num_heads,
                           float scale, float* out, float* lse) {
  const int64_t row = int64_t{kv.kv_heads} * kv.head_dim;
  std::vector<float> k, v;
  for (int b = 0; b < batch; ++b) {
    const int64_t n = PagedSequenceLength(kv, b);
    const int queries = qo_indptr[b + 1] - qo_indptr[b];
    if (queries == 0) continue;
    k.resize(static_cast<size_t>(n * row));
    v.resize(static_cast<size_t>(n * row));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t page = kv.indices[kv.indptr[b] + t / kv.page_size];
      const int64_t at = (page * kv.page_size + t % kv.page_size) * row;
      for (int64_t i = 0; i < row; ++i) {
        k[static_cast<size_t>(t * row + i)] = Bf16ToFloat(kv.k_pages[at + i]);
        v[static_cast<size_t>(t * row + i)] = Bf16ToFloat(kv.v_pages[at + i]);
      }
    }
    AttentionParams p{};
    p.q = q + int64_t{qo_indptr[b]} * num_heads * kv.head_dim;
    p.k = k.data();
    p.v = v.data();
    p.out = out + int64_t{qo_indptr[b]} * num_heads * kv.head_dim;
    p.lse = lse == nullptr ? nullptr : lse + int64_t{qo_indptr[b]} * num_heads;
    p.num_queries = queries;
    p.num_heads = num_heads;
    p.num_kv_heads = kv.kv_heads;
    p.head_dim = kv.head_dim;
    p.kv_row_stride = row;
    p.first_query_pos = static_cast<int>(n - queries);
    p.scale = scale;
    Attention(p);
  }
}

void PagedDecodeAttention(const float* q, const PagedKv& kv, int batch, int num_heads, float scale, float* out,
                          float* lse) {
  // A decode step is a prefill of one new token per sequence.
  std::vector<int32_t> qo_indptr(static_cast<size_t>(batch) + 1);
  for (int b = 0; b <= batch; ++b) qo_indptr[b] = b;
  PagedPrefillAttention(q, kv, qo_indptr.data(), batch, num_heads, scale, out, lse);
}

}  // namespace strata::kernels
