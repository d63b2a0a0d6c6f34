// Device kernels behind cuda_kernels.h. Plain CUDA C++ (no Abseil): launches return
// cudaError_t and cuda_kernels.cc turns them into absl::Status.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;  // a multiple of 32: BlockSum shuffles full warps
constexpr int64_t kMaxBlocks = 65535;

int64_t BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

// Sum of v over the block, returned to every thread.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One block per row. x and y may alias: each element is read before it is written, by the
// same thread, and the whole row is read before BlockSum's barrier.
__global__ void RmsNormKernel(const float* x, const float* __restrict__ weight, float* y, int dim,
                              float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    const float v = x[base + i];
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += kThreads) y[base + i] = (x[base + i] * inv) * weight[i];
}

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

// One block per row: residual += x, then y = RmsNorm(residual). Each element is updated
// by the thread that later normalises it, and the whole row is summed before BlockSum's
// barrier, so y may alias x.
__global__ void AddRmsNormKernel(const float* x, float* residual, const float* __restrict__ weight, float* y, int dim,
                                 float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kThreads) {
    const float v = residual[base + i] + x[base + i];
    residual[base + i] = v;
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += kThreads) y[base + i] = (residual[base + i] * inv) * weight[i];
}

__global__ void SwiGluKernel(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// One block per row.
__global__ void EmbedKernel(const float* __restrict__ table, const int32_t* __restrict__ ids,
                            int dim, float* __restrict__ out) {
  const float* src = table + static_cast<int64_t>(ids[blockIdx.x]) * dim;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) dst[i] = src[i];
}

// One thread per (row, head, i < half) pair.
__global__ void ApplyRopeKernel(float* x, const int32_t* __restrict__ positions, int64_t pairs,
                                int heads, int head_dim, const float* __restrict__ inv_freq) {
  const int half = head_dim / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < pairs;
       p += stride) {
    const int i = static_cast<int>(p % half);
    const int64_t row_head = p / half;
    const int64_t row = row_head / heads;
    const float angle = static_cast<float>(positions[row]) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    float* xh = x + row_head * head_dim;
    const float a = xh[i], b = xh[i + half];
    xh[i] = a * c - b * s;
    xh[i + half] = b * c + a * s;
  }
}

}  // namespace

cudaError_t RmsNormAsync(const float* x, const float* weight, float* y, int rows, int dim,
                         float eps, cudaStream_t stream) {
  RmsNormKernel<<<rows, kThreads, 0, stream>>>(x, weight, y, dim, eps);
  return cudaGetLastError();
}

cudaError_t ArgmaxAsync(const float* logits, int rows, int vocab, int32_t* ids, cudaStream_t stream) {
  ArgmaxKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, ids);
  return cudaGetLastError();
}

cudaError_t AddRmsNormAsync(const float* x, float* residual, const float* weight, float* y, int rows, int dim,
                            float eps, cudaStream_t stream) {
  AddRmsNormKernel<<<rows, kThreads, 0, stream>>>(x, residual, weight, y, dim, eps);
  return cudaGetLastError();
}

cudaError_t SwiGluAsync(const float* gate, const float* up, float* out, int64_t n,
                        cudaStream_t stream) {
  SwiGluKernel<<<static_cast<unsigned>(BlocksFor(n)), kThreads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t EmbedAsync(const float* table, const int32_t* ids, int rows, int dim, float* out,
                       cudaStream_t stream) {
  EmbedKernel<<<rows, kThreads, 0, stream>>>(table, ids, dim, out);
  return cudaGetLastError();
}

cudaError_t ApplyRopeAsync(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                           const float* inv_freq, cudaStream_t stream) {
  const int64_t pairs = static_cast<int64_t>(rows) * heads * (head_dim / 2);
  ApplyRopeKernel<<<static_cast<unsigned>(BlocksFor(pairs)), kThreads, 0, stream>>>(
      x, positions, pairs, heads, head_dim, inv_freq);
  return cudaGetLastError();
}

namespace {

constexpr int kAttnThreads = 128;
constexpr int kMaxSplitTokens = 256;

__device__ __forceinline__ float Bf16ToFloat(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }

// Max and sum over a block of kAttnThreads, returned to every thread.
__device__ float AttnBlockReduce(float v, bool is_max) {
  __shared__ float partial[kAttnThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < kAttnThreads / 32 ? partial[lane] : (is_max ? -INFINITY : 0.0f);
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  return v;
}

// One block per (split, KV head, sequence): the group's query heads against the split's
// tokens; writes each head's partial output (normalised) and log-sum-exp. Each warp takes
// every fourth token; a lane holds kHeadDim/32 consecutive elements of a row, so a K or V
// row is read by one warp in one coalesced sweep.
template <int kHeadDim, int kGroup>
__global__ void PagedDecodePartKernel(const float* __restrict__ q, const uint16_t* __restrict__ k_pages,
                                      const uint16_t* __restrict__ v_pages, int page_size, int kv_heads,
                                      const int32_t* __restrict__ indptr, const int32_t* __restrict__ indices,
                                      const int32_t* __restrict__ last_page_len,
                                      const int32_t* __restrict__ qo_indptr, int batch, int num_heads, float scale,
                                      int split_tokens, float* ws_o, float* ws_lse) {
  constexpr int kPerLane = kHeadDim / 32;
  constexpr int kWarps = kAttnThreads / 32;
  // Query row r belongs to sequence b; with qo_indptr (prefill) it is the j-th of that
  // sequence's new tokens and sees all but the sequence's last (rows - 1 - j) tokens.
  const int split = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z, splits = gridDim.x;
  int b = r;
  int64_t hidden = 0;
  if (qo_indptr != nullptr) {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (qo_indptr[mid] <= r) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    b = lo;
    hidden = qo_indptr[b + 1] - 1 - r;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ float scores[kGroup * kMaxSplitTokens];
  __shared__ float reduce[kWarps * kGroup * kHeadDim];
  const int first_page = indptr[b], pages = indptr[b + 1] - first_page;
  const int64_t len = (pages == 0 ? 0 : int64_t{pages - 1} * page_size + last_page_len[b]) - hidden;
  const int64_t t0 = int64_t{split} * split_tokens;
  const int64_t t1 = min(len, t0 + split_tokens);
  if (t0 >= t1) {  // an empty part: weight zero in the merge
    for (int g = 0; g < kGroup; ++g) {
      const int64_t out_row = (int64_t{r} * splits + split) * num_heads + kvh * kGroup + g;
      for (int d = threadIdx.x; d < kHeadDim; d += kAttnThreads) ws_o[out_row * kHeadDim + d] = 0.0f;
      if (threadIdx.x == 0) ws_lse[out_row] = -INFINITY;
    }
    return;
  }
  float qr[kGroup][kPerLane];
  for (int g = 0; g < kGroup; ++g) {
    const float* qg = q + (int64_t{r} * num_heads + kvh * kGroup + g) * kHeadDim + lane * kPerLane;
    for (int e = 0; e < kPerLane; ++e) qr[g][e] = qg[e];
  }
  const int64_t row = int64_t{kv_heads} * kHeadDim;
  auto slot_of = [&](int64_t t) {
    const int64_t page = indices[first_page + t / page_size];
    return (page * page_size + t % page_size) * row + int64_t{kvh} * kHeadDim + lane * kPerLane;
  };
  const int n = static_cast<int>(t1 - t0);
  for (int i = warp; i < n; i += kWarps) {
    const uint16_t* k = k_pages + slot_of(t0 + i);
    float kf[kPerLane];
    for (int e = 0; e < kPerLane; ++e) kf[e] = Bf16ToFloat(k[e]);
    for (int g = 0; g < kGroup; ++g) {
      float dot = 0.0f;
      for (int e = 0; e < kPerLane; ++e) dot += qr[g][e] * kf[e];
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (lane == 0) scores[g * kMaxSplitTokens + i] = dot * scale;
    }
  }
  __syncthreads();
  float m[kGroup], sum[kGroup];
  for (int g = 0; g < kGroup; ++g) {
    float* sg = scores + g * kMaxSplitTokens;
    float mg = -INFINITY;
    for (int i = threadIdx.x; i < n; i += kAttnThreads) mg = fmaxf(mg, sg[i]);
    mg = AttnBlockReduce(mg, true);
    float sg_sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += kAttnThreads) {
      const float e = expf(sg[i] - mg);
      sg[i] = e;
      sg_sum += e;
    }
    m[g] = mg;
    sum[g] = AttnBlockReduce(sg_sum, false);  // its barriers also publish sg[] to every thread
  }
  float acc[kGroup][kPerLane] = {};
  for (int i = warp; i < n; i += kWarps) {
    const uint16_t* v = v_pages + slot_of(t0 + i);
    float vf[kPerLane];
    for (int e = 0; e < kPerLane; ++e) vf[e] = Bf16ToFloat(v[e]);
    for (int g = 0; g < kGroup; ++g) {
      const float p = scores[g * kMaxSplitTokens + i];
      for (int e = 0; e < kPerLane; ++e) acc[g][e] += p * vf[e];
    }
  }
  for (int g = 0; g < kGroup; ++g) {
    for (int e = 0; e < kPerLane; ++e) reduce[(warp * kGroup + g) * kHeadDim + lane * kPerLane + e] = acc[g][e];
  }
  __syncthreads();
  for (int x = threadIdx.x; x < kGroup * kHeadDim; x += kAttnThreads) {
    const int g = x / kHeadDim, d = x % kHeadDim;
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += reduce[(w * kGroup + g) * kHeadDim + d];
    const int64_t out_row = (int64_t{r} * splits + split) * num_heads + kvh * kGroup + g;
    ws_o[out_row * kHeadDim + d] = total / sum[g];
    if (d == 0) ws_lse[out_row] = m[g] + logf(sum[g]);
  }
}

template <int kHeadDim>
cudaError_t LaunchPart(int group, dim3 grid, cudaStream_t stream, const float* q, const uint16_t* k,
                       const uint16_t* v, int page_size, int kv_heads, const int32_t* indptr, const int32_t* indices,
                       const int32_t* last, const int32_t* qo_indptr, int batch, int num_heads, float scale,
                       int split_tokens, float* ws_o, float* ws_lse) {
  switch (group) {
#define STRATA_PART(G)                                                                                  \
  case G:                                                                                               \
    PagedDecodePartKernel<kHeadDim, G><<<grid, kAttnThreads, 0, stream>>>(                              \
        q, k, v, page_size, kv_heads, indptr, indices, last, qo_indptr, batch, num_heads, scale, split_tokens, \
        ws_o, ws_lse);                                                                                  \
    return cudaGetLastError();
    STRATA_PART(1)
    STRATA_PART(2)
    STRATA_PART(4)
    STRATA_PART(8)
#undef STRATA_PART
  }
  return cudaErrorInvalidValue;
}

// One block per (head, sequence): merges the parts by log-sum-exp.
__global__ void MergePartsKernel(const float* ws_o, const float* ws_lse, int splits, int num_heads, int head_dim,
                                 float* out, float* lse) {
  const int h = blockIdx.x, b = blockIdx.y;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, ws_lse[(int64_t{b} * splits + s) * num_heads + h]);
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float l = ws_lse[(int64_t{b} * splits + s) * num_heads + h];
    total += l == -INFINITY ? 0.0f : expf(l - m);
  }
  for (int d = threadIdx.x; d < head_dim; d += kAttnThreads) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const int64_t r = (int64_t{b} * splits + s) * num_heads + h;
      const float l = ws_lse[r];
      if (l != -INFINITY) acc += expf(l - m) * ws_o[r * head_dim + d];
    }
    out[(int64_t{b} * num_heads + h) * head_dim + d] = total > 0 ? acc / total : 0.0f;
  }
  if (lse != nullptr && threadIdx.x == 0) lse[int64_t{b} * num_heads + h] = total > 0 ? m + logf(total) : -INFINITY;
}

}  // namespace

namespace {

__device__ __forceinline__ uint16_t FloatToBf16Rn(float f) {
  const uint32_t bits = __float_as_uint(f);
  if (f != f) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// One thread per (token, KV head, rotation pair): the pair's K values rotated as
// ApplyRopeKernel does, and the pair's V values, stored bf16 at the token's slot.
__global__ void PlaceKvPagedKernel(const float* __restrict__ k_raw, const float* __restrict__ v,
                                   const int32_t* __restrict__ positions, const int64_t* __restrict__ slots,
                                   int64_t pairs, int kv_heads, int head_dim, const float* __restrict__ inv_freq,
                                   uint16_t* __restrict__ k_pages, uint16_t* __restrict__ v_pages) {
  const int half = head_dim / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < pairs; p += stride) {
    const int i = static_cast<int>(p % half);
    const int64_t token_head = p / half;
    const int64_t token = token_head / kv_heads;
    const int head = static_cast<int>(token_head % kv_heads);
    const float angle = static_cast<float>(positions[token]) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    const float* src_k = k_raw + token_head * head_dim;
    const float* src_v = v + token_head * head_dim;
    const float a = src_k[i], b = src_k[i + half];
    const int64_t dst = (slots[token] * kv_heads + head) * head_dim;
    k_pages[dst + i] = FloatToBf16Rn(a * c - b * s);
    k_pages[dst + i + half] = FloatToBf16Rn(b * c + a * s);
    v_pages[dst + i] = FloatToBf16Rn(src_v[i]);
    v_pages[dst + i + half] = FloatToBf16Rn(src_v[i + half]);
  }
}

}  // namespace

cudaError_t PlaceKvPagedAsync(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots,
                              int n, int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages,
                              uint16_t* v_pages, cudaStream_t stream) {
  const int64_t pairs = int64_t{n} * kv_heads * (head_dim / 2);
  PlaceKvPagedKernel<<<static_cast<unsigned>(BlocksFor(pairs)), kThreads, 0, stream>>>(
      k_raw, v, positions, slots, pairs, kv_heads, head_dim, inv_freq, k_pages, v_pages);
  return cudaGetLastError();
}

cudaError_t PagedDecodeAttentionAsync(const float* q, const uint16_t* k_pages, const uint16_t* v_pages, int page_size,
                                      int kv_heads, int head_dim, const int32_t* indptr, const int32_t* indices,
                                      const int32_t* last_page_len, const int32_t* qo_indptr, int batch, int rows,
                                      int num_heads, float scale, int splits, int split_tokens, float* ws_o,
                                      float* ws_lse, float* out, float* lse, cudaStream_t stream) {
  const dim3 grid(splits, kv_heads, rows);
  const int group = num_heads / kv_heads;
  cudaError_t e = cudaErrorInvalidValue;
  if (head_dim == 64) {
    e = LaunchPart<64>(group, grid, stream, q, k_pages, v_pages, page_size, kv_heads, indptr, indices, last_page_len,
                       qo_indptr, batch, num_heads, scale, split_tokens, ws_o, ws_lse);
  } else if (head_dim == 128) {
    e = LaunchPart<128>(group, grid, stream, q, k_pages, v_pages, page_size, kv_heads, indptr, indices,
                        last_page_len, qo_indptr, batch, num_heads, scale, split_tokens, ws_o, ws_lse);
  }
  if (e != cudaSuccess) return e;
  MergePartsKernel<<<dim3(num_heads, rows), kAttnThreads, 0, stream>>>(ws_o, ws_lse, splits, num_heads, head_dim,
                                                                         out, lse);
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
