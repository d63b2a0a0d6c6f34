// The split-K paged decode kernel's block (decode.h) as a device function, for decode.cu's
// kernel and relay attention's fused launch (relay_kernel.cuh), which runs it beside the
// tensor-core system part. Plain CUDA C++ (no Abseil).
#ifndef STRATA_KERNELS_ATTENTION_DECODE_KERNEL_CUH_
#define STRATA_KERNELS_ATTENTION_DECODE_KERNEL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/decode_launch.h"
#include "kernels/cuda_device.cuh"

namespace strata::kernels::internal {

constexpr int kDecodeThreads = 128;

// The block's layout: lanes per token, token rows, the cp.async pipeline's stages, and the
// shared memory it needs (the stages, reused at the end to merge the lane groups' states).
template <int kHeadDim, int kGroup>
struct DecodeBlockShape {
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a row
  static constexpr int kLanes = kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
  static_assert(kHeadDim % 8 == 0 && kChunks <= kLanes && kLanes <= 32);
  static constexpr int kRows = kDecodeThreads / kLanes;
  static constexpr int kPerThread = 2;  // tokens per thread per stage
  static constexpr int kStageTokens = kRows * kPerThread;
  static constexpr int kStages = 4;
  static constexpr int kStageBytes = kStages * 2 * kStageTokens * kLanes * 16;
  static constexpr int kMergeBytes = kRows * kGroup * (kHeadDim + 2) * 4;
  static constexpr int kSmemBytes = kStageBytes > kMergeBytes ? kStageBytes : kMergeBytes;
};

// Eight bf16 (one 16-byte load) widened to fp32; widening is exact.
__device__ __forceinline__ void UnpackBf16x8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Decode attention, one block's work: part `split` of `splits` (tokens [t0, t1) of the
// row's sequence), KV head and subgroup `y`, query row `r` (the grid's x, y and z in
// PagedDecodeAttentionAsync's launch): kGroup query heads of the KV head's group (all of
// them, or one of group / kGroup subgroups) in one pass over the part's K and V rows.
//
// Threads: kDecodeThreads; kLanes lanes share a token, each holding 8 of its dims (one
// 16-byte chunk of the bf16 row): head_dim / 8 rounded up to a power of two, so a lane group
// is a shuffle group within a warp (head_dim 80 and 96 leave lanes 10..15 and 12..15 idle,
// holding zeros); the block's kRows lane groups take different tokens.
// Every thread copies, with cp.async, exactly the chunks it later reads, so the
// kStages-deep pipeline needs no barrier: each thread waits only on its own copies. Each
// lane group keeps its own online softmax (max, sum, output) per head, in log2 units
// (q is pre-scaled by scale * log2(e)); the groups are merged through shared memory at
// the end. One part per row without a.ws_row_parts writes out/lse directly; otherwise the
// part's normalised output and natural-log lse go to the workspace (SplitKvArgs says
// where) for a merge. `smem` holds DecodeBlockShape<kHeadDim, kGroup>::kSmemBytes, 16-byte
// aligned; every thread of the block must call this, and it ends with no barrier pending.
template <int kHeadDim, int kGroup>
__device__ __forceinline__ void DecodePartBlock(const SplitKvArgs& a, int split, int y, int r, int splits,
                                                unsigned char* smem) {
  const float* __restrict__ q = a.q;
  const uint16_t* __restrict__ k_pages = a.k_pages;
  const uint16_t* __restrict__ v_pages = a.v_pages;
  const int32_t* __restrict__ indptr = a.indptr;
  const int32_t* __restrict__ indices = a.indices;
  const int32_t* __restrict__ last_page_len = a.last_page_len;
  const int32_t* __restrict__ qo_indptr = a.qo_indptr;
  const int page_size = a.page_size, kv_heads = a.kv_heads, batch = a.batch, num_heads = a.num_heads;
  const int group = num_heads / kv_heads, split_tokens = a.split_tokens;
  const float scale_log2 = a.scale * 1.4426950408889634f;
  float* ws_o = a.ws_o;
  float* ws_lse = a.ws_lse;
  float* out = a.out;
  float* lse = a.lse;
  // Where the parts go: part s of row r at r * row_parts + first_part + s.
  const bool to_parts = splits > 1 || a.ws_row_parts > 0;
  const int row_parts = a.ws_row_parts > 0 ? a.ws_row_parts : splits, first_part = a.ws_first_part;

  using Shape = DecodeBlockShape<kHeadDim, kGroup>;
  constexpr int kChunks = Shape::kChunks, kLanes = Shape::kLanes, kRows = Shape::kRows;
  constexpr int kPerThread = Shape::kPerThread, kStageTokens = Shape::kStageTokens, kStages = Shape::kStages;
  constexpr int kAttnThreads = kDecodeThreads;
  uint4(*stage)[2][kStageTokens][kLanes] = reinterpret_cast<uint4(*)[2][kStageTokens][kLanes]>(smem);

  const int subgroups = group / kGroup, kvh = y / subgroups;
  const int hb = kvh * group + (y % subgroups) * kGroup;  // the block's first query head
  const int tx = threadIdx.x % kLanes, ty = threadIdx.x / kLanes;
  const bool lane_active = tx < kChunks;  // idle lanes copy nothing and hold zeros
  const int chunk = lane_active ? tx : 0;
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
  const int64_t head0 = int64_t{r} * num_heads + hb;
  if (t0 >= t1) {  // an empty part: weight zero in the merge (or, alone, an empty sequence)
    const int64_t part_head = (int64_t{r} * row_parts + first_part + split) * num_heads + hb;
    if (!to_parts && a.out_bf16 != nullptr) {
      for (int x = threadIdx.x; x < kGroup * kHeadDim; x += kAttnThreads) a.out_bf16[head0 * kHeadDim + x] = 0;
    } else {
      float* o = to_parts ? ws_o + part_head * kHeadDim : out + head0 * kHeadDim;
      for (int x = threadIdx.x; x < kGroup * kHeadDim; x += kAttnThreads) o[x] = 0.0f;
    }
    if (threadIdx.x < kGroup) {
      if (to_parts) {
        ws_lse[part_head + threadIdx.x] = -INFINITY;
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
      const int64_t at = (page * page_size + tt % page_size) * row_elems + int64_t{kvh} * kHeadDim + chunk * 8;
      CpAsync16(&stage[buf][0][i][tx], k_pages + at, valid && lane_active);
      CpAsync16(&stage[buf][1][i][tx], v_pages + at, valid && lane_active);
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  float qr[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const float4* qg = reinterpret_cast<const float4*>(q + (head0 + g) * kHeadDim + chunk * 8);
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 a = lane_active ? qg[0] : zero, c = lane_active ? qg[1] : zero;
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
    if (lane_active) {
      float4* dst = reinterpret_cast<float4*>(merge_acc + (ty * kGroup + g) * kHeadDim + tx * 8);
      dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
    }
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
    if (!to_parts) {
      if (a.out_bf16 != nullptr) {
        a.out_bf16[(head0 + g) * kHeadDim + d] = Narrow(o / sum);
      } else {
        out[(head0 + g) * kHeadDim + d] = o / sum;
      }
      if (d == 0 && lse != nullptr) lse[head0 + g] = part_lse;
    } else {
      const int64_t part_row = (int64_t{r} * row_parts + first_part + split) * num_heads + hb + g;
      ws_o[part_row * kHeadDim + d] = o / sum;
      if (d == 0) ws_lse[part_row] = part_lse;
    }
  }
}

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_DECODE_KERNEL_CUH_
