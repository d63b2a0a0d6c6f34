// Device kernels behind cuda_kernels.h. Plain CUDA C++ (no Abseil): launches return
// cudaError_t and cuda_kernels.cc turns them into absl::Status.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_device.cuh"
#include "kernels/cuda_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;  // a multiple of 32: BlockSum shuffles full warps
constexpr int64_t kMaxBlocks = 65535;

int64_t BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
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


// Eight bf16 (one 16-byte load) widened to fp32; widening is exact.
__device__ __forceinline__ void UnpackBf16x8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Decode attention, one block per (part, KV head, query row): the group's kGroup query
// heads against the part's tokens [t0, t1), in one pass over its K and V rows.
//
// Threads: kLanes = head_dim / 8 lanes share a token, each holding 8 of its dims (one
// 16-byte chunk of the bf16 row); the block's kRows lane groups take different tokens.
// Every thread copies, with cp.async, exactly the chunks it later reads, so the
// kStages-deep pipeline needs no barrier: each thread waits only on its own copies. Each
// lane group keeps its own online softmax (max, sum, output) per head, in log2 units
// (q is pre-scaled by scale * log2(e)); the groups are merged through shared memory at
// the end. One part per row (gridDim.x == 1) writes out/lse directly, otherwise the
// part's normalised output and natural-log lse go to the workspace for MergePartsKernel.
template <int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kAttnThreads)
    PagedDecodeKernel(const float* __restrict__ q, const uint16_t* __restrict__ k_pages,
                      const uint16_t* __restrict__ v_pages, int page_size, int kv_heads,
                      const int32_t* __restrict__ indptr, const int32_t* __restrict__ indices,
                      const int32_t* __restrict__ last_page_len, const int32_t* __restrict__ qo_indptr, int batch,
                      int num_heads, float scale_log2, int split_tokens, float* ws_o, float* ws_lse, float* out,
                      float* lse) {
  constexpr int kLanes = kHeadDim / 8;
  constexpr int kRows = kAttnThreads / kLanes;
  constexpr int kPerThread = 2;  // tokens per thread per stage
  constexpr int kStageTokens = kRows * kPerThread;
  constexpr int kStages = 4;
  constexpr int kStageBytes = kStages * 2 * kStageTokens * kHeadDim * 2;
  constexpr int kMergeBytes = kRows * kGroup * (kHeadDim + 2) * 4;
  __shared__ __align__(16) unsigned char smem[kStageBytes > kMergeBytes ? kStageBytes : kMergeBytes];
  uint4(*stage)[2][kStageTokens][kLanes] = reinterpret_cast<uint4(*)[2][kStageTokens][kLanes]>(smem);

  const int split = blockIdx.x, kvh = blockIdx.y, r = blockIdx.z, splits = gridDim.x;
  const int tx = threadIdx.x % kLanes, ty = threadIdx.x / kLanes;
  // Query row r belongs to sequence b; with qo_indptr (prefill) it is the j-th of that
  // sequence's new tokens and sees all but the sequence's last (rows - 1 - j) tokens.
  int b = r;
  int hidden = 0;
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
  const int first_page = indptr[b], pages = indptr[b + 1] - first_page;
  // Token counts fit in int: the launch checks max_tokens.
  const int len = (pages == 0 ? 0 : (pages - 1) * page_size + last_page_len[b]) - hidden;
  const int t0 = split * split_tokens;
  const int t1 = min(len, t0 + split_tokens);
  const int64_t head0 = int64_t{r} * num_heads + kvh * kGroup;
  if (t0 >= t1) {  // an empty part: weight zero in the merge (or, alone, an empty sequence)
    float* o = splits == 1 ? out + head0 * kHeadDim : ws_o + (int64_t{r} * splits + split) * num_heads * kHeadDim +
                                                          int64_t{kvh} * kGroup * kHeadDim;
    for (int x = threadIdx.x; x < kGroup * kHeadDim; x += kAttnThreads) o[x] = 0.0f;
    if (threadIdx.x < kGroup) {
      if (splits > 1) {
        ws_lse[(int64_t{r} * splits + split) * num_heads + kvh * kGroup + threadIdx.x] = -INFINITY;
      } else if (lse != nullptr) {
        lse[head0 + threadIdx.x] = -INFINITY;
      }
    }
    return;
  }

  const int64_t row_elems = int64_t{kv_heads} * kHeadDim;
  const int stages = (t1 - t0 + kStageTokens - 1) / kStageTokens;
  // Issues stage s's copies: this thread's tokens ty + j * kRows, chunk tx, of K and V.
  auto issue = [&](int s) {
    const int buf = s % kStages;
    if (s >= stages) {  // past the end: an empty group keeps the wait counts uniform
      CpAsyncCommit();
      return;
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = j * kRows + ty;
      const int t = t0 + s * kStageTokens + i;
      const bool valid = t < t1;
      const int tt = valid ? t : t0;
      const int64_t page = indices[first_page + tt / page_size];
      const int64_t at = (page * page_size + tt % page_size) * row_elems + int64_t{kvh} * kHeadDim + tx * 8;
      CpAsync16(&stage[buf][0][i][tx], k_pages + at, valid);
      CpAsync16(&stage[buf][1][i][tx], v_pages + at, valid);
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  float qr[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const float4* qg = reinterpret_cast<const float4*>(q + (head0 + g) * kHeadDim + tx * 8);
    const float4 a = qg[0], c = qg[1];
    const float v[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) qr[g][e] = v[e] * scale_log2;
  }
  float m[kGroup], l[kGroup], acc[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  for (int s = 0; s < stages; ++s) {
    issue(s + kStages - 1);  // into the buffer read at s - 1, which this thread is done with
    CpAsyncWait<kStages - 1>();
    const int buf = s % kStages;
    float score[kPerThread][kGroup];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      float kf[8];
      UnpackBf16x8(stage[buf][0][j * kRows + ty][tx], kf);
      const bool valid = t0 + s * kStageTokens + j * kRows + ty < t1;
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float d = qr[g][0] * kf[0];
#pragma unroll
        for (int e = 1; e < 8; ++e) d = __fmaf_rn(qr[g][e], kf[e], d);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        score[j][g] = valid ? d : -INFINITY;
      }
    }
    float p[kPerThread][kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float mx = score[0][g];
#pragma unroll
      for (int j = 1; j < kPerThread; ++j) mx = fmaxf(mx, score[j][g]);
      const float m_new = fmaxf(m[g], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = FastExp2(m[g] - m_use);
      m[g] = m_new;
      float sum = l[g] * alpha;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        p[j][g] = FastExp2(score[j][g] - m_use);
        sum += p[j][g];
      }
      l[g] = sum;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      float vf[8];
      UnpackBf16x8(stage[buf][1][j * kRows + ty][tx], vf);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = __fmaf_rn(p[j][g], vf[e], acc[g][e]);
      }
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // every thread is done with the stages: the buffer becomes the merge area

  float* merge_acc = reinterpret_cast<float*>(smem);              // [kRows][kGroup][kHeadDim]
  float* merge_m = merge_acc + kRows * kGroup * kHeadDim;         // [kRows][kGroup]
  float* merge_l = merge_m + kRows * kGroup;                      // [kRows][kGroup]
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    float4* dst = reinterpret_cast<float4*>(merge_acc + (ty * kGroup + g) * kHeadDim + tx * 8);
    dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
    dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
    if (tx == 0) {
      merge_m[ty * kGroup + g] = m[g];
      merge_l[ty * kGroup + g] = l[g];
    }
  }
  __syncthreads();
  constexpr float kLn2 = 0.693147180559945309f;
  for (int x = threadIdx.x; x < kGroup * kHeadDim; x += kAttnThreads) {
    const int g = x / kHeadDim, d = x % kHeadDim;
    float mx = -INFINITY;
#pragma unroll
    for (int y = 0; y < kRows; ++y) mx = fmaxf(mx, merge_m[y * kGroup + g]);  // finite: the part is not empty
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int y = 0; y < kRows; ++y) {
      const float w = FastExp2(merge_m[y * kGroup + g] - mx);
      sum += merge_l[y * kGroup + g] * w;
      o += merge_acc[(y * kGroup + g) * kHeadDim + d] * w;
    }
    const float part_lse = (mx + __log2f(sum)) * kLn2;
    if (splits == 1) {
      out[(head0 + g) * kHeadDim + d] = o / sum;
      if (d == 0 && lse != nullptr) lse[head0 + g] = part_lse;
    } else {
      const int64_t part_row = (int64_t{r} * splits + split) * num_heads + kvh * kGroup + g;
      ws_o[part_row * kHeadDim + d] = o / sum;
      if (d == 0) ws_lse[part_row] = part_lse;
    }
  }
}

template <int kHeadDim>
cudaError_t LaunchDecode(int group, dim3 grid, cudaStream_t stream, const float* q, const uint16_t* k,
                         const uint16_t* v, int page_size, int kv_heads, const int32_t* indptr, const int32_t* indices,
                         const int32_t* last, const int32_t* qo_indptr, int batch, int num_heads, float scale_log2,
                         int split_tokens, float* ws_o, float* ws_lse, float* out, float* lse) {
  switch (group) {
#define STRATA_DECODE(G)                                                                                       \
  case G:                                                                                                      \
    PagedDecodeKernel<kHeadDim, G><<<grid, kAttnThreads, 0, stream>>>(q, k, v, page_size, kv_heads, indptr,    \
                                                                      indices, last, qo_indptr, batch,         \
                                                                      num_heads, scale_log2, split_tokens,     \
                                                                      ws_o, ws_lse, out, lse);                 \
    return cudaGetLastError();
    STRATA_DECODE(1)
    STRATA_DECODE(2)
    STRATA_DECODE(4)
    STRATA_DECODE(8)
#undef STRATA_DECODE
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
    k_pages[dst + i] = Narrow(a * c - b * s);
    k_pages[dst + i + half] = Narrow(b * c + a * s);
    v_pages[dst + i] = Narrow(src_v[i]);
    v_pages[dst + i + half] = Narrow(src_v[i + half]);
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
  const float scale_log2 = scale * 1.4426950408889634f;
  cudaError_t e = cudaErrorInvalidValue;
  if (head_dim == 64) {
    e = LaunchDecode<64>(group, grid, stream, q, k_pages, v_pages, page_size, kv_heads, indptr, indices,
                         last_page_len, qo_indptr, batch, num_heads, scale_log2, split_tokens, ws_o, ws_lse, out, lse);
  } else if (head_dim == 128) {
    e = LaunchDecode<128>(group, grid, stream, q, k_pages, v_pages, page_size, kv_heads, indptr, indices,
                          last_page_len, qo_indptr, batch, num_heads, scale_log2, split_tokens, ws_o, ws_lse, out,
                          lse);
  }
  if (e != cudaSuccess || splits == 1) return e;
  MergePartsKernel<<<dim3(num_heads, rows), kAttnThreads, 0, stream>>>(ws_o, ws_lse, splits, num_heads, head_dim,
                                                                         out, lse);
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
