// Device kernels behind cuda_model_kernels.h (plain CUDA C++, no Abseil).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_device.cuh"
#include "kernels/cuda_model_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // one block per token row for the KV placement kernels

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

// K and V of one token's KV head `h` into the three planes at `slot` (one layer's
// planes). k(j), v(j) give the head's raw fp32 values (bias applied), j < head_dim; the
// caller's block strides over pairs and values.
template <typename KFn, typename VFn>
__device__ void PlaceHead(KFn k, VFn v, int h, int32_t position, int64_t slot, int kv_heads, int head_dim,
                          const float* __restrict__ inv_freq, uint16_t* k_rot, uint16_t* k_raw, uint16_t* v_plane) {
  const int half = head_dim / 2;
  const int64_t base = slot * kv_heads * head_dim + int64_t{h} * head_dim;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const uint16_t raw_a = Narrow(k(i)), raw_b = Narrow(k(i + half));
    k_raw[base + i] = raw_a;
    k_raw[base + i + half] = raw_b;
    float ra, rb;
    Rotate(Widen(raw_a), Widen(raw_b), position, inv_freq[i], &ra, &rb);
    k_rot[base + i] = Narrow(ra);
    k_rot[base + i + half] = Narrow(rb);
  }
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) v_plane[base + j] = Narrow(v(j));
}

// Grid (rows, num_heads + kv_heads): block (r, y) rotates query head y of row r, or, for
// y >= num_heads, places KV head y - num_heads. One block a head keeps small batches
// (decode) spread over the GPU instead of on one multiprocessor a row.
__global__ void QkvRopePlaceKernel(QkvPlaceParams p) {
  const int r = blockIdx.x, y = blockIdx.y;
  const int qd = p.num_heads * p.head_dim, kvd = p.kv_heads * p.head_dim, width = qd + 2 * kvd, half = p.head_dim / 2;
  const float* row = p.qkv + static_cast<int64_t>(r) * width;
  const float* bias = p.bias;
  const int32_t position = p.positions[r];
  auto value = [row, bias](int j) { return bias != nullptr ? row[j] + bias[j] : row[j]; };
  if (y < p.num_heads) {
    float* q = p.q_out + static_cast<int64_t>(r) * qd + y * p.head_dim;
    const int at = y * p.head_dim;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      Rotate(value(at + i), value(at + i + half), position, p.inv_freq[i], &q[i], &q[i + half]);
    }
    return;
  }
  const int h = y - p.num_heads;
  const int k_at = qd + h * p.head_dim, v_at = qd + kvd + h * p.head_dim;
  PlaceHead([&](int j) { return value(k_at + j); }, [&](int j) { return value(v_at + j); }, h, position, p.slots[r],
            p.kv_heads, p.head_dim, p.inv_freq, p.k_rot, p.k_raw, p.v);
}

// Grid (n, layers).
__global__ void PlaceStoredKvKernel(const uint16_t* __restrict__ stored, StoredKvParams p) {
  const int i = blockIdx.x, l = blockIdx.y;
  const int kvd = p.kv_heads * p.head_dim;
  const uint16_t* ks = stored + ((static_cast<int64_t>(l) * 2 + 0) * p.chunk_tokens + i) * kvd;
  const uint16_t* vs = stored + ((static_cast<int64_t>(l) * 2 + 1) * p.chunk_tokens + i) * kvd;
  const int64_t plane = l * p.layer_stride;
  for (int h = 0; h < p.kv_heads; ++h) {
    const uint16_t* kh = ks + h * p.head_dim;
    const uint16_t* vh = vs + h * p.head_dim;
    PlaceHead([kh](int j) { return Widen(kh[j]); }, [vh](int j) { return Widen(vh[j]); }, h, p.positions[i],
              p.slots[i], p.kv_heads, p.head_dim, p.inv_freq, p.k_rot + plane, p.k_raw + plane, p.v + plane);
  }
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

// ---- Sampling (SampleToken in cpu_kernels.h; sums in double like it). ----
//
// No sort: the nucleus is found by searches over logit values. A token's probability
// exp(l / T - m) is a non-decreasing function of its logit, so "the most probable tokens
// whose mass reaches top_p" are the tokens with logit >= some value λ (those at λ taken in
// index order, the spec's tie order), and the spec's walk in probability order stops at
// the token whose logit μ is the largest value with more kept mass at or above it than the
// target. Each search pass histograms the mass of the keys in the current range into 4096
// bins (3 passes over the row for 32-bit keys); passes read the row 16 bytes at a time,
// several loads in flight per thread.

constexpr int kSampleThreads = 512;

// Order-preserving map of a float to an unsigned key (NaN excluded by the caller).
__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float Unkey(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ double BlockSumD(double v) { return BlockReduce(v, SumOp{}, 0.0); }
__device__ uint64_t BlockSumU64(uint64_t v) { return BlockReduce(v, SumOp{}, uint64_t{0}); }
__device__ uint32_t BlockMaxU(uint32_t v) { return BlockReduce(v, MaxOp{}, 0u); }
__device__ uint32_t BlockMinU(uint32_t v) { return ~BlockMaxU(~v); }

// Calls fn(i, logit) for every element of the row (in no particular order), loading 16
// bytes at a time, four loads in flight per thread, when the row is 16-byte aligned.
template <typename Fn>
__device__ __forceinline__ void ForRow(const float* __restrict__ l, int vocab, Fn fn) {
  int done = 0;
  if ((reinterpret_cast<uintptr_t>(l) & 15) == 0) {
    const int n4 = vocab / 4;
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const int step = static_cast<int>(blockDim.x);
    for (int j = threadIdx.x; j < n4; j += 4 * step) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (j + u * step < n4) v[u] = __ldg(l4 + j + u * step);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int jj = j + u * step;
        if (jj < n4) {
          fn(4 * jj, v[u].x);
          fn(4 * jj + 1, v[u].y);
          fn(4 * jj + 2, v[u].z);
          fn(4 * jj + 3, v[u].w);
        }
      }
    }
    done = 4 * n4;
  }
  for (int i = done + threadIdx.x; i < vocab; i += blockDim.x) fn(i, l[i]);
}

// The first index i (in index order) at which the running sum of weight(i) exceeds
// `target`, -1 if none: each thread sums its own contiguous stretch of the row, the block
// scans the stretch sums, and the thread whose stretch holds the target walks it.
template <typename WeightFn>
__device__ int FirstPrefixAbove(int n, double target, WeightFn weight) {
  __shared__ double warp_total[32];
  const int per = (n + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int begin = min(n, static_cast<int>(threadIdx.x) * per), end = min(n, begin + per);
  double sum = 0;
  for (int i = begin; i < end; ++i) sum += weight(i);
  // Exclusive scan of the stretch sums over the block.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double scan = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, scan, o);
    if (lane >= o) scan += up;
  }
  if (lane == 31) warp_total[warp] = scan;
  __syncthreads();
  double before = scan - sum;
  for (int w = 0; w < warp; ++w) before += warp_total[w];
  __syncthreads();
  uint32_t found = 0xffffffffu;
  if (sum > 0 && target < before + sum) {
    double c = before;
    int last = -1;
    for (int i = begin; i < end; ++i) {
      const double w = weight(i);
      if (w <= 0) continue;
      last = i;
      c += w;
      if (target < c) break;
    }
    found = static_cast<uint32_t>(last);  // the walk's rounding may end a hair short: its last token
  }
  found = BlockMinU(found);
  return found == 0xffffffffu ? -1 : static_cast<int>(found);
}

// Probability mass in fixed point (units of 2^-44; a probability is at most 1, so 128K of
// them sum below 2^61): integer sums are the same whatever order the threads add in, so
// the histogram searches below are deterministic although they use atomics.
constexpr double kFixedOne = 17592186044416.0;  // 2^44
constexpr int kBins = 4096;                    // 12 key bits a pass: 3 passes for 32-bit keys


// The largest key K in [lo, hi] for which accept(mass of the tokens with key >= K) holds,
// given that it holds at lo (the mass falls as K rises, so accepted keys are a prefix).
// Each pass spreads the range over kBins bins of mass in shared memory and keeps the
// bin where acceptance ends.
// `bins` ([kBins]) and `thread_total` ([blockDim]) are the caller's shared memory.
template <typename FixedProbFn, typename AcceptFn>
__device__ uint32_t SearchLargest(const float* l, int vocab, uint32_t lo, uint32_t hi, FixedProbFn prob,
                                  AcceptFn accept, uint64_t* bins, uint64_t* thread_total) {
  const int per = kBins / kSampleThreads;  // bins a thread scans
  while (lo < hi) {
    const uint64_t width = ((static_cast<uint64_t>(hi) - lo + 1) + kBins - 1) / kBins;
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    uint64_t above = 0;  // mass of keys past hi
    ForRow(l, vocab, [&](int, float x) {
      const uint32_t k = Key(x);
      if (k < lo) return;
      const uint64_t p = prob(x);
      if (k > hi) {
        above += p;
      } else {
        atomicAdd(reinterpret_cast<unsigned long long*>(&bins[(k - lo) / width]), static_cast<unsigned long long>(p));
      }
    });
    above = BlockSumU64(above);  // its barrier also ends the histogram's adds
    // Thread t owns bins [t * per, (t + 1) * per); the mass at or above its first bin's
    // start is its own bins plus every later thread's plus `above`.
    uint64_t mine = 0;
    for (int b = 0; b < per; ++b) mine += bins[threadIdx.x * per + b];
    thread_total[threadIdx.x] = mine;
    __syncthreads();
    uint64_t later = above;
    for (int t = threadIdx.x + 1; t < static_cast<int>(blockDim.x); ++t) later += thread_total[t];
    // Bins past the range's last key hold nothing and must not be chosen (with a
    // threshold of 0 every bin "accepts").
    const int used = static_cast<int>((static_cast<uint64_t>(hi) - lo) / width);  // the last bin holding keys
    int best = -1;
    uint64_t cum = later;
    for (int b = per - 1; b >= 0; --b) {
      cum += bins[threadIdx.x * per + b];
      if (threadIdx.x * per + b <= used && accept(cum)) {
        best = threadIdx.x * per + b;
        break;
      }
    }
    const int last = static_cast<int>(BlockMaxU(static_cast<uint32_t>(best + 1))) - 1;  // also a barrier
    if (last < 0) return lo;  // only lo itself accepts (cannot happen: its bin holds lo)
    const uint64_t start = lo + static_cast<uint64_t>(last) * width;
    const uint64_t end = start + width - 1;
    lo = static_cast<uint32_t>(start);
    hi = static_cast<uint32_t>(end < hi ? end : hi);
  }
  return lo;
}

// One block per row.
__global__ void SampleKernel(const float* __restrict__ logits, int vocab, const float* __restrict__ temperature,
                             const float* __restrict__ top_p, const double* __restrict__ u, int32_t* ids) {
  const int r = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(r) * vocab;
  const float t = temperature[r];
  // Largest and smallest logit keys.
  uint32_t kmax = 0, kmin_inv = 0;
  ForRow(l, vocab, [&](int, float x) {
    const uint32_t k = Key(x);
    kmax = max(kmax, k);
    kmin_inv = max(kmin_inv, ~k);
  });
  kmax = BlockMaxU(kmax);
  const uint32_t kmin = ~BlockMaxU(kmin_inv);
  if (!(t > 0)) {
    // Greedy: the lowest index with the largest logit.
    uint32_t first = 0xffffffffu;
    ForRow(l, vocab, [&](int i, float x) {
      if (Key(x) == kmax) first = min(first, static_cast<uint32_t>(i));
    });
    first = BlockMinU(first);
    if (threadIdx.x == 0) ids[r] = static_cast<int32_t>(first);
    return;
  }
  const double inv_t = 1.0 / static_cast<double>(t);
  const double m = static_cast<double>(Unkey(kmax)) * inv_t;
  // The exponent in double, the exponential in fp32 (the special-function unit; a double
  // exp per element per pass cost ~1.5 ms a row): monotone in the logit, so order and ties
  // are kept; each probability within ~1e-7 of the CPU's double exp.
  auto prob_of = [inv_t, m](float x) {
    return static_cast<double>(expf(static_cast<float>(static_cast<double>(x) * inv_t - m)));
  };
  const float p_cut = top_p[r];
  if (!(p_cut > 0 && p_cut < 1)) {
    // Every token, in index order.
    double total = 0;
    ForRow(l, vocab, [&](int, float x) { total += prob_of(x); });
    total = BlockSumD(total);
    const double target = u[r] * total;
    int pick = FirstPrefixAbove(vocab, target, [&](int i) { return prob_of(l[i]); });
    if (pick < 0) {  // u * total rounded past the sum: the last token with probability > 0
      uint32_t last = 0;
      ForRow(l, vocab, [&](int i, float x) {
        if (prob_of(x) > 0) last = max(last, static_cast<uint32_t>(i) + 1);
      });
      pick = static_cast<int>(BlockMaxU(last)) - 1;
    }
    if (threadIdx.x == 0) ids[r] = pick < 0 ? 0 : pick;
    return;
  }
  // From here on, masses in fixed point (kFixedOne = probability 1).
  __shared__ uint64_t bins[kBins];
  __shared__ uint64_t thread_total[kSampleThreads];
  auto fixed = [&](float x) { return static_cast<uint64_t>(prob_of(x) * kFixedOne); };
  uint64_t total_f = 0;
  ForRow(l, vocab, [&](int, float x) { total_f += fixed(x); });
  total_f = BlockSumU64(total_f);
  // λ: the largest logit key whose at-or-above mass reaches top_p * total.
  // At least one unit: a top_p too small for the fixed point still keeps the top token.
  const uint64_t need =
      max(static_cast<uint64_t>(static_cast<double>(p_cut) * static_cast<double>(total_f)), uint64_t{1});
  const uint32_t lambda =
      SearchLargest(l, vocab, kmin, kmax, fixed, [need](uint64_t s) { return s >= need; }, bins, thread_total);
  // Mass strictly above λ and the ties at λ, in one pass.
  uint64_t above = 0, ties = 0;
  ForRow(l, vocab, [&](int, float x) {
    const uint32_t key = Key(x);
    if (key > lambda) above += fixed(x);
    if (key == lambda) ++ties;
  });
  above = BlockSumU64(above);
  ties = BlockSumU64(ties);
  const uint64_t p_lambda = fixed(Unkey(lambda));
  // Ties at λ join in index order until the mass reaches `need` (above < need: λ is the
  // largest key that reaches it).
  uint64_t k = ties;
  if (p_lambda > 0) {
    const uint64_t wanted = (need - above + p_lambda - 1) / p_lambda;
    k = wanted < 1 ? 1 : (wanted < ties ? wanted : ties);
  }
  const uint64_t kept = above + k * p_lambda;
  // μ: the largest key whose kept at-or-above mass exceeds the target (above λ, the kept
  // mass at or above a key is all of the mass there; at λ it exceeds the target).
  const uint64_t target = static_cast<uint64_t>(u[r] * static_cast<double>(kept));
  const uint32_t mu =
      SearchLargest(l, vocab, lambda, kmax, fixed, [target](uint64_t s) { return s > target; }, bins, thread_total);
  uint64_t below_mu = above, mu_ties = k;
  if (mu != lambda) {
    below_mu = 0;
    mu_ties = 0;
    ForRow(l, vocab, [&](int, float x) {
      const uint32_t key = Key(x);
      if (key > mu) below_mu += fixed(x);
      if (key == mu) ++mu_ties;
    });
    below_mu = BlockSumU64(below_mu);
    mu_ties = BlockSumU64(mu_ties);
  }
  const uint64_t p_mu = fixed(Unkey(mu));
  uint64_t j = 0;
  if (p_mu > 0 && target >= below_mu) j = (target - below_mu) / p_mu;
  if (j + 1 > mu_ties) j = mu_ties - 1;
  // The j-th (0-based) token with logit μ, in index order.
  const int pick = FirstPrefixAbove(vocab, static_cast<double>(j), [&](int i) { return Key(l[i]) == mu ? 1.0 : 0.0; });
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
  QkvRopePlaceKernel<<<dim3(p.rows, p.num_heads + p.kv_heads), p.head_dim / 2 > 32 ? 64 : 32, 0, stream>>>(p);
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
