// Device kernels behind sampling.h (plain CUDA C++, no Abseil).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_device.cuh"
#include "kernels/sampling/sampling_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;  // the argmax's block

// One block per row: each thread keeps the best (value, lowest index) of its stride, then
// the block reduces pairs; a larger value wins, equal values go to the lower index.
__global__ void ArgmaxKernel(const float* __restrict__ logits, int vocab, int32_t* ids) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -INFINITY;
  int best_i = vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v > best || (v == best && i < best_i)) {
      best = v;
      best_i = i;
    }
  }
  __shared__ float values[kThreads];
  __shared__ int index[kThreads];
  values[threadIdx.x] = best;
  index[threadIdx.x] = best_i;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      const float v = values[threadIdx.x + half];
      const int i = index[threadIdx.x + half];
      if (v > values[threadIdx.x] || (v == values[threadIdx.x] && i < index[threadIdx.x])) {
        values[threadIdx.x] = v;
        index[threadIdx.x] = i;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = index[0] < vocab ? index[0] : 0;
}


// ---- Sampling (SampleToken in sampling_cpu.h; sums in double like it). ----
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

}  // namespace

cudaError_t ArgmaxAsync(const float* logits, int rows, int vocab, int32_t* ids, cudaStream_t stream) {
  ArgmaxKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, ids);
  return cudaGetLastError();
}


cudaError_t SampleAsync(const float* logits, int rows, int vocab, const float* temperature, const float* top_p,
                        const double* u, int32_t* ids, cudaStream_t stream) {
  SampleKernel<<<rows, kSampleThreads, 0, stream>>>(logits, vocab, temperature, top_p, u, ids);
  return cudaGetLastError();
}


}  // namespace strata::kernels::internal
