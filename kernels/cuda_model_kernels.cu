// Device kernels behind cuda_model_kernels.h (plain CUDA C++, no Abseil).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_model_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // one block per token row for the KV placement kernels

__device__ __forceinline__ float Widen(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }

// Round to nearest, ties to even; NaN stays NaN (as FloatToBf16 in cpu_kernels.cc).
__device__ __forceinline__ uint16_t Narrow(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Sum over the block, returned to every thread; may be called more than once per kernel.
__device__ float BlockSum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

__global__ void EmbedBf16Kernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ ids, int dim,
                                float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const uint16_t* row = table + static_cast<int64_t>(ids[r]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[r * dim + i] = Widen(row[i]);
}

// One block per row. Each thread reads back only the elements it wrote itself.
__global__ void RmsNormToBf16Kernel(const float* __restrict__ add, float* x, const float* __restrict__ weight,
                                    uint16_t* __restrict__ y, int dim, float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = x[base + i];
    if (add != nullptr) {
      v += add[base + i];
      x[base + i] = v;
    }
    ss += v * v;
  }
  const float mean = BlockSum(ss) / static_cast<float>(dim);
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) y[base + i] = Narrow((x[base + i] * inv) * weight[i]);
}

__global__ void SwiGluToBf16Kernel(const float* __restrict__ gate_up, uint16_t* __restrict__ out, int64_t n, int ffn) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n; idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / ffn, i = idx % ffn;
    const float g = gate_up[r * 2 * ffn + i];
    const float u = gate_up[r * 2 * ffn + ffn + i];
    out[idx] = Narrow(g / (1.0f + expf(-g)) * u);
  }
}

__global__ void ToBf16Kernel(const float* __restrict__ x, uint16_t* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = Narrow(x[i]);
  }
}

// The rotation of one (i, i + half) pair, as ApplyRope: the one place both the forward
// pass and the session-cache load rotate K, so both give the same bits.
__device__ __forceinline__ void Rotate(float a, float b, int32_t position, float inv_freq, float* ra, float* rb) {
  const float angle = static_cast<float>(position) * inv_freq;
  const float c = cosf(angle), s = sinf(angle);
  *ra = a * c - b * s;
  *rb = b * c + a * s;
}

// K and V of one token into the three planes at `slot` (one layer's planes). k(j), v(j)
// give raw fp32 values (bias applied); the caller's block strides over pairs and values.
template <typename KFn, typename VFn>
__device__ void PlaceToken(KFn k, VFn v, int32_t position, int64_t slot, int kv_heads, int head_dim,
                           const float* __restrict__ inv_freq, uint16_t* k_rot, uint16_t* k_raw, uint16_t* v_plane) {
  const int half = head_dim / 2, kvd = kv_heads * head_dim;
  const int64_t base = slot * kvd;
  for (int idx = threadIdx.x; idx < kv_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    const int ja = h * head_dim + i, jb = ja + half;
    const uint16_t raw_a = Narrow(k(ja)), raw_b = Narrow(k(jb));
    k_raw[base + ja] = raw_a;
    k_raw[base + jb] = raw_b;
    float ra, rb;
    Rotate(Widen(raw_a), Widen(raw_b), position, inv_freq[i], &ra, &rb);
    k_rot[base + ja] = Narrow(ra);
    k_rot[base + jb] = Narrow(rb);
  }
  for (int j = threadIdx.x; j < kvd; j += blockDim.x) v_plane[base + j] = Narrow(v(j));
}

__global__ void QkvRopePlaceKernel(QkvPlaceParams p) {
  const int r = blockIdx.x;
  const int qd = p.num_heads * p.head_dim, kvd = p.kv_heads * p.head_dim, width = qd + 2 * kvd, half = p.head_dim / 2;
  const float* row = p.qkv + static_cast<int64_t>(r) * width;
  const float* bias = p.bias;
  const int32_t position = p.positions[r];
  auto value = [row, bias](int j) { return bias != nullptr ? row[j] + bias[j] : row[j]; };
  float* q = p.q_out + static_cast<int64_t>(r) * qd;
  for (int idx = threadIdx.x; idx < p.num_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    const int ja = h * p.head_dim + i, jb = ja + half;
    Rotate(value(ja), value(jb), position, p.inv_freq[i], &q[ja], &q[jb]);
  }
  PlaceToken([&](int j) { return value(qd + j); }, [&](int j) { return value(qd + kvd + j); }, position, p.slots[r],
             p.kv_heads, p.head_dim, p.inv_freq, p.k_rot, p.k_raw, p.v);
}

// Grid (n, layers).
__global__ void PlaceStoredKvKernel(const uint16_t* __restrict__ stored, StoredKvParams p) {
  const int i = blockIdx.x, l = blockIdx.y;
  const int kvd = p.kv_heads * p.head_dim;
  const uint16_t* ks = stored + ((static_cast<int64_t>(l) * 2 + 0) * p.chunk_tokens + i) * kvd;
  const uint16_t* vs = stored + ((static_cast<int64_t>(l) * 2 + 1) * p.chunk_tokens + i) * kvd;
  const int64_t plane = l * p.layer_stride;
  PlaceToken([ks](int j) { return Widen(ks[j]); }, [vs](int j) { return Widen(vs[j]); }, p.positions[i], p.slots[i],
             p.kv_heads, p.head_dim, p.inv_freq, p.k_rot + plane, p.k_raw + plane, p.v + plane);
}

// Grid (n, layers).
__global__ void GatherStoredKvKernel(StoredKvParams p, uint16_t* __restrict__ stored) {
  const int i = blockIdx.x, l = blockIdx.y;
  const int kvd = p.kv_heads * p.head_dim;
  const int64_t src = l * p.layer_stride + p.slots[i] * kvd;
  uint16_t* ks = stored + ((static_cast<int64_t>(l) * 2 + 0) * p.chunk_tokens + i) * kvd;
  uint16_t* vs = stored + ((static_cast<int64_t>(l) * 2 + 1) * p.chunk_tokens + i) * kvd;
  for (int j = threadIdx.x; j < kvd; j += blockDim.x) {
    ks[j] = p.k_raw[src + j];
    vs[j] = p.v[src + j];
  }
}

__global__ void GatherRowsBf16Kernel(const uint16_t* __restrict__ in, const int32_t* __restrict__ rows, int dim,
                                     uint16_t* __restrict__ out) {
  const int64_t j = blockIdx.x;
  const uint16_t* src = in + static_cast<int64_t>(rows[j]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[j * dim + i] = src[i];
}

__device__ __forceinline__ uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void FillRandomBf16Kernel(uint16_t* out, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(SplitMix(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull)) >> 40) *
                    (1.0f / 16777216.0f);
    out[i] = Narrow((2.0f * u - 1.0f) * scale);
  }
}

__global__ void FillF32Kernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

// ---- Sampling (SampleToken in cpu_kernels.h, in double precision like it). ----
//
// No sort: the nucleus is found by a binary search over logit values. A token's
// probability exp(l / T - m) is a non-decreasing function of its logit, so "the most
// probable tokens whose mass reaches top_p" are the tokens with logit >= some value λ
// (those at λ taken in index order as the spec's tie order says), and the spec's walk in
// probability order stops at the token whose logit μ is the largest value with more
// kept mass at or above it than the target. Each search step is one pass over the row.

constexpr int kSampleThreads = 512;

// Order-preserving map of a float to an unsigned key (NaN excluded by the caller).
__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float Unkey(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ double BlockSumD(double v) {
  __shared__ double partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

__device__ uint32_t BlockMaxU(uint32_t v) {
  __shared__ uint32_t partial[32];
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0u;
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  return v;
}

__device__ uint32_t BlockMinU(uint32_t v) { return ~BlockMaxU(~v); }

// The first index i (in index order) at which the running sum of weight(i) exceeds
// `target`; -1 if none. One tile of blockDim elements at a time, scanned across the block.
template <typename WeightFn>
__device__ int FirstPrefixAbove(int n, double target, WeightFn weight) {
  __shared__ double warp_total[32];
  double carry = 0;
  for (int base = 0; base < n; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const double w = i < n ? weight(i) : 0.0;
    double scan = w;  // inclusive scan within the warp
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
      const double up = __shfl_up_sync(0xffffffffu, scan, o);
      if (lane >= o) scan += up;
    }
    if (lane == 31) warp_total[warp] = scan;
    __syncthreads();
    double before = carry;
    for (int wi = 0; wi < warp; ++wi) before += warp_total[wi];
    double tile = 0;
    for (int wi = 0; wi < static_cast<int>(blockDim.x >> 5); ++wi) tile += warp_total[wi];
    __syncthreads();
    const bool hit = i < n && w > 0 && target < before + scan;
    const uint32_t first = BlockMinU(hit ? static_cast<uint32_t>(i) : 0xffffffffu);
    if (first != 0xffffffffu) return static_cast<int>(first);
    carry += tile;
  }
  return -1;
}

// One block per row.
__global__ void SampleKernel(const float* __restrict__ logits, int vocab, const float* __restrict__ temperature,
                             const float* __restrict__ top_p, const double* __restrict__ u, int32_t* ids) {
  const int r = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(r) * vocab;
  const float t = temperature[r];
  // Largest logit (lowest index on ties): greedy, and the softmax's shift.
  uint32_t kmax = 0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) kmax = max(kmax, Key(l[i]));
  kmax = BlockMaxU(kmax);
  if (!(t > 0)) {
    uint32_t first = 0xffffffffu;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      if (Key(l[i]) == kmax) first = min(first, static_cast<uint32_t>(i));
    }
    first = BlockMinU(first);
    if (threadIdx.x == 0) ids[r] = static_cast<int32_t>(first);
    return;
  }
  const double inv_t = 1.0 / static_cast<double>(t);
  const double m = static_cast<double>(Unkey(kmax)) * inv_t;
  auto prob = [&](int i) { return exp(static_cast<double>(l[i]) * inv_t - m); };
  // Mass of the tokens whose key is >= k.
  auto mass_at_or_above = [&](uint32_t k) {
    double s = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      if (Key(l[i]) >= k) s += prob(i);
    }
    return BlockSumD(s);
  };
  const double total = mass_at_or_above(0);
  const float p_cut = top_p[r];
  if (!(p_cut > 0 && p_cut < 1)) {
    // Every token, in index order.
    const double target = u[r] * total;
    int pick = FirstPrefixAbove(vocab, target, [&](int i) { return prob(i); });
    if (pick < 0) {  // u * total rounded past the sum: the last token with probability > 0
      uint32_t last = 0;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (prob(i) > 0) last = max(last, static_cast<uint32_t>(i) + 1);
      }
      pick = static_cast<int>(BlockMaxU(last)) - 1;
    }
    if (threadIdx.x == 0) ids[r] = pick < 0 ? 0 : pick;
    return;
  }
  // λ: the largest logit key whose at-or-above mass reaches top_p * total.
  const double need = static_cast<double>(p_cut) * total;
  uint32_t kmin = 0xffffffffu;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) kmin = min(kmin, Key(l[i]));
  kmin = BlockMinU(kmin);
  uint32_t lo = kmin, hi = kmax;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (mass_at_or_above(mid) >= need) lo = mid; else hi = mid - 1;
  }
  const uint32_t lambda = lo;
  const double above = lambda == 0xffffffffu ? 0.0 : mass_at_or_above(lambda + 1);
  const double p_lambda = exp(static_cast<double>(Unkey(lambda)) * inv_t - m);
  double ties = 0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) ties += Key(l[i]) == lambda ? 1.0 : 0.0;
  ties = BlockSumD(ties);
  // Ties at λ join in index order until the mass reaches `need`.
  const double k = fmin(ties, fmax(1.0, ceil((need - above) / p_lambda)));
  const double kept = above + k * p_lambda;
  // μ: the largest key whose kept at-or-above mass exceeds the target.
  const double target = u[r] * kept;
  auto kept_at_or_above = [&](uint32_t key) { return key <= lambda ? kept : mass_at_or_above(key); };
  lo = lambda;
  hi = kmax;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (kept_at_or_above(mid) > target) lo = mid; else hi = mid - 1;
  }
  const uint32_t mu = lo;
  const double below_mu = mu == lambda ? above : mass_at_or_above(mu + 1);
  const double p_mu = exp(static_cast<double>(Unkey(mu)) * inv_t - m);
  double mu_ties = k;
  if (mu != lambda) {
    mu_ties = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) mu_ties += Key(l[i]) == mu ? 1.0 : 0.0;
    mu_ties = BlockSumD(mu_ties);
  }
  const double j = fmin(mu_ties - 1, fmax(0.0, floor((target - below_mu) / p_mu)));
  // The j-th (0-based) token with logit μ, in index order.
  const int pick = FirstPrefixAbove(vocab, j, [&](int i) { return Key(l[i]) == mu ? 1.0 : 0.0; });
  if (threadIdx.x == 0) ids[r] = pick < 0 ? 0 : pick;
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

}  // namespace

cudaError_t EmbedBf16Async(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out,
                           cudaStream_t stream) {
  EmbedBf16Kernel<<<rows, kThreads, 0, stream>>>(table, ids, dim, out);
  return cudaGetLastError();
}

cudaError_t RmsNormToBf16Async(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim,
                               float eps, cudaStream_t stream) {
  RmsNormToBf16Kernel<<<rows, dim >= 2048 ? 512 : kThreads, 0, stream>>>(add, x, weight, y, dim, eps);
  return cudaGetLastError();
}

cudaError_t SwiGluToBf16Async(const float* gate_up, uint16_t* out, int rows, int ffn, cudaStream_t stream) {
  const int64_t n = int64_t{rows} * ffn;
  SwiGluToBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(gate_up, out, n, ffn);
  return cudaGetLastError();
}

cudaError_t ToBf16Async(const float* x, uint16_t* out, int64_t n, cudaStream_t stream) {
  ToBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}

cudaError_t QkvRopePlaceAsync(const QkvPlaceParams& p, cudaStream_t stream) {
  QkvRopePlaceKernel<<<p.rows, kRowThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t PlaceStoredKvAsync(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream) {
  PlaceStoredKvKernel<<<dim3(p.n, p.layers), kRowThreads, 0, stream>>>(stored, p);
  return cudaGetLastError();
}

cudaError_t GatherStoredKvAsync(const StoredKvParams& p, uint16_t* stored, cudaStream_t stream) {
  GatherStoredKvKernel<<<dim3(p.n, p.layers), kRowThreads, 0, stream>>>(p, stored);
  return cudaGetLastError();
}

cudaError_t GatherRowsBf16Async(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out,
                                cudaStream_t stream) {
  GatherRowsBf16Kernel<<<n, kThreads, 0, stream>>>(in, rows, dim, out);
  return cudaGetLastError();
}

cudaError_t FillRandomBf16Async(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  FillRandomBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(out, n, seed, scale);
  return cudaGetLastError();
}

cudaError_t SampleAsync(const float* logits, int rows, int vocab, const float* temperature, const float* top_p,
                        const double* u, int32_t* ids, cudaStream_t stream) {
  SampleKernel<<<rows, kSampleThreads, 0, stream>>>(logits, vocab, temperature, top_p, u, ids);
  return cudaGetLastError();
}

cudaError_t FillF32Async(float* out, int64_t n, float value, cudaStream_t stream) {
  FillF32Kernel<<<GridFor(n), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
