// The (o, lse) merge of partial attentions (plain CUDA C++, no Abseil): see merge_launch.h.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/attention/merge_launch.h"
#include "kernels/alignment.h"
#include "kernels/cuda_device.cuh"

namespace strata::kernels::internal {
namespace {

constexpr int kMergeThreads = 128;

// One block per (head, sequence): merges the parts by log-sum-exp, with the part already in
// `out` (lse out_lse) when out_lse is given. Each output element is read (as that part) and
// written by the same thread.
__global__ void MergePartsKernel(const float* ws_o, const float* ws_lse, int splits, int num_heads, int head_dim,
                                 const float* out_lse, float* out, float* lse, uint16_t* out_bf16) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t row = int64_t{b} * num_heads + h;
  const float base = out_lse != nullptr ? out_lse[row] : -INFINITY;
  float m = base;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, ws_lse[(int64_t{b} * splits + s) * num_heads + h]);
  const float base_w = base == -INFINITY ? 0.0f : expf(base - m);
  float total = base_w;
  for (int s = 0; s < splits; ++s) {
    const float l = ws_lse[(int64_t{b} * splits + s) * num_heads + h];
    total += l == -INFINITY ? 0.0f : expf(l - m);
  }
  for (int d = threadIdx.x; d < head_dim; d += kMergeThreads) {
    float acc = base_w > 0.0f ? base_w * out[row * head_dim + d] : 0.0f;
    for (int s = 0; s < splits; ++s) {
      const int64_t r = (int64_t{b} * splits + s) * num_heads + h;
      const float l = ws_lse[r];
      if (l != -INFINITY) acc += expf(l - m) * ws_o[r * head_dim + d];
    }
    const float merged = total > 0 ? acc / total : 0.0f;
    if (out_bf16 != nullptr) {
      out_bf16[row * head_dim + d] = Narrow(merged);
    } else {
      out[row * head_dim + d] = merged;
    }
  }
  if (lse != nullptr && threadIdx.x == 0) lse[row] = total > 0 ? m + logf(total) : -INFINITY;
}

constexpr int kRowMergeWarps = 4;
constexpr int kFewParts = 8;  // MergeRowPartsKernel's parts loaded all at once

std::atomic<int> parts_at_once{kFewParts};  // SetMergeLoadsAtOnceForBenchmarks

// A lane's 4 merged dims, acc / total, into out's row (or out_bf16's).
__device__ __forceinline__ void StoreMerged(float4 acc, float total, bool active, int d, int64_t item, int head_dim,
                                            float* out_row, uint16_t* out_bf16) {
  if (!active) return;
  const float4 r = total > 0.0f ? make_float4(acc.x / total, acc.y / total, acc.z / total, acc.w / total)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (out_bf16 != nullptr) {  // 8-byte aligned: the launch checked the row start, head_dim % 4 == 0
    *reinterpret_cast<uint2*>(out_bf16 + item * head_dim + d) = make_uint2(NarrowPair(r.x, r.y), NarrowPair(r.z, r.w));
  } else {
    *reinterpret_cast<float4*>(out_row + d) = r;
  }
}

// One warp per (row, head): the parts' weights exp(lse - max) one a lane (32 at a time,
// passed round by shuffles), each lane accumulating 4 dims (float4) of every part; up to
// at_once (kFewParts, or 0 to compare) parts at head_dim <= 128, every part's lse and dims
// loaded at once instead. With out_lse, `out` holds one more part on entry (taken first, as
// MergePartsKernel does); with lse, the merged lse is written. Each output element is read
// and written by one lane.
__global__ void __launch_bounds__(kRowMergeWarps * 32)
    MergeRowPartsKernel(const float* __restrict__ ws_o, const float* __restrict__ ws_lse, int row_parts,
                        int full_rows, int few_parts, int rows, int num_heads, int head_dim,
                        const float* __restrict__ out_lse, float* out, float* __restrict__ lse_out,
                        uint16_t* __restrict__ out_bf16, int at_once) {
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t{blockIdx.x} * kRowMergeWarps + (threadIdx.x >> 5);
  if (item >= int64_t{rows} * num_heads) return;  // a whole warp
  const int b = static_cast<int>(item / num_heads), h = static_cast<int>(item % num_heads);
  const int parts = b < full_rows ? row_parts : few_parts;
  const float* lse = ws_lse + int64_t{b} * row_parts * num_heads + h;  // part s at lse[s * num_heads]
  const float* o = ws_o + (int64_t{b} * row_parts * num_heads + h) * head_dim;
  const int64_t part_stride = int64_t{num_heads} * head_dim;
  const float base = out_lse != nullptr ? out_lse[item] : -INFINITY;
  float* const out_row = out + item * head_dim;
  if (parts <= at_once && head_dim <= 128) {
    // Few parts (relay's system part, a decode's few splits): every load issued before the
    // first is used, every part's lse by every lane and this lane's 4 dims of each part, so the
    // warp waits for memory once (the loop below waits a round for the lse, then for each
    // group of parts).
    const int d = lane * 4;
    const bool active = d < head_dim;
    float l[kFewParts];
    float4 v[kFewParts];
#pragma unroll
    for (int s = 0; s < kFewParts; ++s) {
      l[s] = s < parts ? lse[int64_t{s} * num_heads] : -INFINITY;
      v[s] = s < parts && active ? *reinterpret_cast<const float4*>(o + s * part_stride + d)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float4 base_v = active && base != -INFINITY ? *reinterpret_cast<const float4*>(out_row + d)
                                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float m = base;
#pragma unroll
    for (int s = 0; s < kFewParts; ++s) m = fmaxf(m, l[s]);
    const float base_w = base == -INFINITY ? 0.0f : expf(base - m);
    float total = base_w;
    float4 acc = make_float4(base_w * base_v.x, base_w * base_v.y, base_w * base_v.z, base_w * base_v.w);
#pragma unroll
    for (int s = 0; s < kFewParts; ++s) {
      const float w = l[s] == -INFINITY ? 0.0f : expf(l[s] - m);
      total += w;
      if (w > 0.0f) {
        acc.x += w * v[s].x;
        acc.y += w * v[s].y;
        acc.z += w * v[s].z;
        acc.w += w * v[s].w;
      }
    }
    StoreMerged(acc, total, active, d, item, head_dim, out_row, out_bf16);
    if (lse_out != nullptr && lane == 0) lse_out[item] = total > 0.0f ? m + logf(total) : -INFINITY;
    return;
  }
  float m = base;
  for (int s = lane; s < parts; s += 32) m = fmaxf(m, lse[int64_t{s} * num_heads]);
  for (int x = 16; x > 0; x >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, x));
  const float base_w = base == -INFINITY ? 0.0f : expf(base - m);
  float total = 0.0f;
  for (int s = lane; s < parts; s += 32) {
    const float l = lse[int64_t{s} * num_heads];
    total += l == -INFINITY ? 0.0f : expf(l - m);
  }
  for (int x = 16; x > 0; x >>= 1) total += __shfl_xor_sync(0xffffffffu, total, x);
  total += base_w;
  // Every lane runs every round (the shuffles need the whole warp); lanes past head_dim load nothing.
  for (int d0 = 0; d0 < head_dim; d0 += 128) {
    const int d = d0 + lane * 4;
    const bool active = d < head_dim;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (active && base_w > 0.0f) {
      const float4 v = *reinterpret_cast<const float4*>(out_row + d);
      acc = make_float4(base_w * v.x, base_w * v.y, base_w * v.z, base_w * v.w);
    }
    for (int s0 = 0; s0 < parts; s0 += 32) {
      const float l = s0 + lane < parts ? lse[int64_t{s0 + lane} * num_heads] : -INFINITY;
      const float w_lane = l == -INFINITY ? 0.0f : expf(l - m);
      const int n = min(32, parts - s0);
#pragma unroll 4
      for (int j = 0; j < n; ++j) {
        const float w = __shfl_sync(0xffffffffu, w_lane, j);
        if (active && w > 0.0f) {
          const float4 v = *reinterpret_cast<const float4*>(o + (s0 + j) * part_stride + d);
          acc.x += w * v.x;
          acc.y += w * v.y;
          acc.z += w * v.z;
          acc.w += w * v.w;
        }
      }
    }
    StoreMerged(acc, total, active, d, item, head_dim, out_row, out_bf16);
  }
  if (lse_out != nullptr && lane == 0) lse_out[item] = total > 0.0f ? m + logf(total) : -INFINITY;
}

}  // namespace

cudaError_t MergeRowPartsAsync(const float* ws_o, const float* ws_lse, int row_parts, int full_rows, int few_parts,
                               int rows, int num_heads, int head_dim, float* out, cudaStream_t stream) {
  const int64_t items = int64_t{rows} * num_heads;
  const unsigned blocks = static_cast<unsigned>((items + kRowMergeWarps - 1) / kRowMergeWarps);
  MergeRowPartsKernel<<<blocks, kRowMergeWarps * 32, 0, stream>>>(ws_o, ws_lse, row_parts, full_rows, few_parts,
                                                                  rows, num_heads, head_dim, nullptr, out, nullptr,
                                                                  nullptr, parts_at_once.load());
  return cudaGetLastError();
}

cudaError_t MergeStatesAsync(const float* ws_o, const float* ws_lse, int splits, int rows, int num_heads,
                             int head_dim, float* out, float* lse, cudaStream_t stream, const float* out_lse,
                             uint16_t* out_bf16) {
  // The warp-per-row merge where its float4 loads may run (the decode's 64 x 28-head, two-part
  // merge: 6.2 -> 4.7 us on the H100), else a block per (head, row).
  const int64_t items = int64_t{rows} * num_heads;
  if (items == 0) return cudaSuccess;
  if (head_dim % 4 == 0 && IsAligned(ws_o, 16) && IsAligned(out, 16) && IsAligned(out_bf16, 8)) {
    const unsigned blocks = static_cast<unsigned>((items + kRowMergeWarps - 1) / kRowMergeWarps);
    MergeRowPartsKernel<<<blocks, kRowMergeWarps * 32, 0, stream>>>(ws_o, ws_lse, splits, rows, splits, rows,
                                                                    num_heads, head_dim, out_lse, out, lse, out_bf16,
                                                                    parts_at_once.load());
    return cudaGetLastError();
  }
  MergePartsKernel<<<dim3(num_heads, rows), kMergeThreads, 0, stream>>>(ws_o, ws_lse, splits, num_heads, head_dim,
                                                                         out_lse, out, lse, out_bf16);
  return cudaGetLastError();
}

void SetMergeLoadsAtOnceForBenchmarks(bool at_once) { parts_at_once.store(at_once ? kFewParts : 0); }

}  // namespace strata::kernels::internal
