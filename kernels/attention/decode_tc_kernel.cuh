// The tensor-core decode with the keys of a part split among the warps of its block: each
// warp streams every kKeyWarps-th 32-key tile of the part through its own cp.async stages
// (the one-warp form of prefill_tc_kernel.cuh, per warp), and the warps merge their
// (max, sum, output) through shared memory at the end — a part's keys split kKeyWarps ways
// with no merge launch. Plain CUDA C++ (no Abseil).
#ifndef STRATA_KERNELS_ATTENTION_DECODE_TC_KERNEL_CUH_
#define STRATA_KERNELS_ATTENTION_DECODE_TC_KERNEL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/cuda_device.cuh"
#include "kernels/dependent_launch.cuh"

namespace strata::kernels::internal {
namespace decode_tc {

constexpr int kKeyTile = 32;

// Shared memory: the Q tile and each warp's stages of K and V tiles; after the loop the
// same bytes hold each warp's output rows, maxima and sums for the merge.
template <int kHeadDim, int kKeyWarps, int kStages>
constexpr int SmemBytes() {
  constexpr int tiles = (16 + kKeyWarps * 2 * kStages * kKeyTile) * (kHeadDim + 8) * 2;
  constexpr int merge = kKeyWarps * 16 * (kHeadDim + 2) * 4;
  return tiles > merge ? tiles : merge;
}

// One block per (part, KV head and subgroup, sequence) of a decode (p.qo_indptr null: row
// b is sequence b's one new token, the last of its keys): the kGroup query heads as the
// rows of one 16-row tile, as the one-warp form of PrefillTcBlock; its part's key tiles
// dealt round-robin to kKeyWarps warps. Writes the part as PrefillTcBlock does (to
// ws_o / ws_lse with key_splits > 1, else out, or out_bf16 when set, and lse).
template <int kHeadDim, int kGroup, int kKeyWarps, int kStages>
__global__ void __launch_bounds__(kKeyWarps * 32) PagedDecodeTcKernel(const PrefillTcParams p) {
  static_assert(kStages >= 2 && kKeyWarps >= 1 && kHeadDim <= 128);
  extern __shared__ __align__(16) uint16_t smem[];
  using prefill_tc::LdMatrixX4;
  using prefill_tc::LdMatrixX4Trans;
  using prefill_tc::Mma;
  using prefill_tc::PackBf16;
  constexpr int kStride = kHeadDim + 8;     // bf16 per shared-memory row
  constexpr int kChunks = kHeadDim / 8;     // 16-byte chunks per row
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of Q K^T
  constexpr int kKeyFrags = kKeyTile / 8;   // 8-key column blocks of S
  constexpr int kDimFrags = kHeadDim / 8;   // 8-dim column blocks of O
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int by = blockIdx.y, b = blockIdx.z, split = blockIdx.x;
  const int group = p.num_heads / p.kv_heads, subgroups = group / kGroup, kvh = by / subgroups;
  const int hb = kvh * group + (by % subgroups) * kGroup;  // the block's first query head
  const int first_page = p.indptr[b], pages = p.indptr[b + 1] - first_page;
  const int len = pages == 0 ? 0 : (pages - 1) * p.page_size + p.last_page_len[b];
  const int query_pos = len - 1;  // the new token sees every key
  const int all_key_tiles = (len + kKeyTile - 1) / kKeyTile;
  const int split_tiles = (all_key_tiles + p.key_splits - 1) / p.key_splits;
  const int kt_begin = min(all_key_tiles, split * split_tiles);
  const int key_tiles = min(all_key_tiles, kt_begin + split_tiles);
  // This warp's tiles: kt_begin + warp + i * kKeyWarps for i < my_tiles.
  const int my_tiles = kt_begin + warp < key_tiles ? (key_tiles - kt_begin - warp + kKeyWarps - 1) / kKeyWarps : 0;
  auto tile_of = [&](int i) { return kt_begin + warp + i * kKeyWarps; };
  const int64_t row_elems = int64_t{p.kv_heads} * kHeadDim;
  uint16_t* s_q = smem;
  uint16_t* s_k = s_q + 16 * kStride + warp * 2 * kStages * kKeyTile * kStride;  // [kStages][kKeyTile][kStride]
  uint16_t* s_v = s_k + kStages * kKeyTile * kStride;

  // A tile row per lane: each lane looks up its row of the next tile an iteration ahead,
  // and every copy takes its row's offset from that lane by a shuffle.
  int64_t row_ahead = 0;
  auto fetch_rows = [&](int kt) {
    const int t = kt * kKeyTile + lane, at = t < len ? t : 0;
    row_ahead = (int64_t{p.indices[first_page + at / p.page_size]} * p.page_size + at % p.page_size) * row_elems +
                int64_t{kvh} * kHeadDim;
  };
  auto load_kv = [&](int kt, int buf) {
    uint16_t* dk = s_k + buf * kKeyTile * kStride;
    uint16_t* dv = s_v + buf * kKeyTile * kStride;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int copy = lane + j * 32, row = copy / kChunks, chunk = copy % kChunks;
      const bool valid = kt * kKeyTile + row < len;
      const int64_t at = __shfl_sync(0xffffffffu, row_ahead, row) + chunk * 8;
      CpAsync16(dk + row * kStride + chunk * 8, p.k_pages + at, valid);
      CpAsync16(dv + row * kStride + chunk * 8, p.v_pages + at, valid);
    }
    CpAsyncCommit();
  };
  // Copies the warp's tile i into buffer buf and looks up the rows of its next one (an
  // empty group past the last tile keeps the wait counts uniform).
  auto issue = [&](int i, int buf) {
    if (i < my_tiles) {
      load_kv(tile_of(i), buf);
      if (i + 1 < my_tiles) fetch_rows(tile_of(i + 1));
    } else {
      CpAsyncCommit();
    }
  };
  if (my_tiles > 0) {
    fetch_rows(tile_of(0));
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(i, i);
  }

  // Q tile -> bf16 in shared memory (rows past the group's heads are zero).
  for (int i = threadIdx.x; i < 16 * kHeadDim / 4; i += kKeyWarps * 32) {
    const int row = i / (kHeadDim / 4), col = i % (kHeadDim / 4) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < kGroup) v = *reinterpret_cast<const float4*>(p.q + (int64_t{b} * p.num_heads + hb + row) * kHeadDim + col);
    *reinterpret_cast<uint2*>(s_q + row * kStride + col) = make_uint2(PackBf16(v.x, v.y), PackBf16(v.z, v.w));
  }
  __syncthreads();
  const uint16_t* q_frag_base = s_q + (lane & 15) * kStride + (lane >> 4) * 8;

  const float scale_log2 = p.scale * prefill_tc::kLog2e;
  float o[kDimFrags][4];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int d = 0; d < kDimFrags; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;

  for (int i = 0; i < my_tiles; ++i) {
    const int kt = tile_of(i), buf = i % kStages;
    issue(i + kStages - 1, (i + kStages - 1) % kStages);  // into the buffer of tile i - 1
    CpAsyncWait<kStages - 1>();                            // tile i has landed
    __syncwarp();
    const uint16_t* k_tile = s_k + buf * kKeyTile * kStride;
    const uint16_t* v_tile = s_v + buf * kKeyTile * kStride;
    float s[kKeyFrags][4];
#pragma unroll
    for (int n = 0; n < kKeyFrags; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      uint32_t qa[4];
      LdMatrixX4(qa, q_frag_base + ks * 16);
#pragma unroll
      for (int n2 = 0; n2 < kKeyFrags / 2; ++n2) {
        uint32_t kb[4];
        LdMatrixX4(kb, k_tile + (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * kStride + ks * 16 + ((lane >> 3) & 1) * 8);
        Mma(s[2 * n2], qa, kb[0], kb[1]);
        Mma(s[2 * n2 + 1], qa, kb[2], kb[3]);
      }
    }
    if (kt * kKeyTile + kKeyTile - 1 > query_pos) {  // the tile runs past the last key
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kt * kKeyTile + n * 8 + (lane & 3) * 2 + (e & 1) > query_pos) s[n][e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_use = mx == -INFINITY ? 0.0f : mx;
      const float alpha = FastExp2((row_max[h] - m_use) * scale_log2);
      row_max[h] = mx;
      const float bias = m_use * scale_log2;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) {
        s[n][2 * h] = FastExp2(fmaf(s[n][2 * h], scale_log2, -bias));
        s[n][2 * h + 1] = FastExp2(fmaf(s[n][2 * h + 1], scale_log2, -bias));
        sum += s[n][2 * h] + s[n][2 * h + 1];
      }
      row_sum[h] = row_sum[h] * alpha + sum;
#pragma unroll
      for (int d = 0; d < kDimFrags; ++d) {
        o[d][2 * h] *= alpha;
        o[d][2 * h + 1] *= alpha;
      }
    }
    // O += P V: the S accumulators of two adjacent 8-key blocks are the A fragment of a
    // 16-key step.
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = PackBf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = PackBf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int d2 = 0; d2 < kDimFrags / 2; ++d2) {
        uint32_t vb[4];
        LdMatrixX4Trans(vb, v_tile + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + d2 * 16 +
                                (lane >> 4) * 8);
        Mma(o[2 * d2], pa, vb[0], vb[1]);
        Mma(o[2 * d2 + 1], pa, vb[2], vb[3]);
      }
    }
    __syncwarp();  // the warp is done with buf before it is refilled
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // each row's sum over the quad's columns
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }

  if constexpr (kKeyWarps > 1) {
    // Every warp's rows to shared memory (its stages are free: every copy it made has
    // landed), then warp 0 takes them in: weights exp2((max_w - max) * scale).
    CpAsyncWait<0>();
    __syncthreads();
    float* x_o = reinterpret_cast<float*>(smem);  // [kKeyWarps][16][kHeadDim]
    float* x_m = x_o + kKeyWarps * 16 * kHeadDim;  // [kKeyWarps][16]
    float* x_l = x_m + kKeyWarps * 16;             // [kKeyWarps][16]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = (lane >> 2) + h * 8;
      float* dst = x_o + (warp * 16 + row) * kHeadDim + (lane & 3) * 2;
#pragma unroll
      for (int d = 0; d < kDimFrags; ++d) *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * h], o[d][2 * h + 1]);
      if ((lane & 3) == 0) {
        x_m[warp * 16 + row] = row_max[h];
        x_l[warp * 16 + row] = row_sum[h];
      }
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = (lane >> 2) + h * 8;
      float m = -INFINITY;
#pragma unroll
      for (int w = 0; w < kKeyWarps; ++w) m = fmaxf(m, x_m[w * 16 + row]);
      float weight[kKeyWarps], sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kKeyWarps; ++w) {
        const float mw = x_m[w * 16 + row];
        weight[w] = mw == -INFINITY ? 0.0f : FastExp2((mw - m) * scale_log2);
        sum += x_l[w * 16 + row] * weight[w];
      }
      row_max[h] = m;
      row_sum[h] = sum;
#pragma unroll
      for (int d = 0; d < kDimFrags; ++d) {
        float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int w = 0; w < kKeyWarps; ++w) {
          const float2 v = *reinterpret_cast<const float2*>(x_o + (w * 16 + row) * kHeadDim + d * 8 + (lane & 3) * 2);
          acc.x += weight[w] * v.x;
          acc.y += weight[w] * v.y;
        }
        o[d][2 * h] = acc.x;
        o[d][2 * h + 1] = acc.y;
      }
    }
  }

  // The part's rows (the group's heads), as PrefillTcBlock writes them.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int g = (lane >> 2) + h * 8;
    if (g >= kGroup) continue;
    const float sum = row_sum[h];
    const int64_t head_row = int64_t{b} * p.num_heads + hb + g;
    const int row_parts = p.ws_row_parts > 0 ? p.ws_row_parts : p.key_splits;
    const int64_t part_row = (int64_t{b} * row_parts + p.ws_first_part + split) * p.num_heads + hb + g;
    float* dst = (p.ws_o != nullptr ? p.ws_o + part_row * kHeadDim : p.out + head_row * kHeadDim) + (lane & 3) * 2;
    // sum >= 1 when the part has keys (the row's maximum contributes exp2(0)); 0 when empty.
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (p.out_bf16 != nullptr && p.ws_o == nullptr) {  // the o projection's input, cast here
      uint16_t* dst16 = p.out_bf16 + head_row * kHeadDim + (lane & 3) * 2;
#pragma unroll
      for (int d = 0; d < kDimFrags; ++d) {
        *reinterpret_cast<uint32_t*>(dst16 + d * 8) = NarrowPair(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
      }
    } else {
#pragma unroll
      for (int d = 0; d < kDimFrags; ++d) {
        *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
      }
    }
    if ((lane & 3) == 0) {
      const float part_lse = sum > 0.0f ? row_max[h] * p.scale + logf(sum) : -INFINITY;
      if (p.ws_o != nullptr) {
        p.ws_lse[part_row] = part_lse;
      } else if (p.lse != nullptr) {
        p.lse[head_row] = part_lse;
      }
    }
  }
}

template <int kHeadDim, int kGroup, int kKeyWarps, int kStages>
cudaError_t LaunchDecodeTc(const PrefillTcParams& p, cudaStream_t stream) {
  constexpr int kSmem = SmemBytes<kHeadDim, kKeyWarps, kStages>();
  auto* kernel = PagedDecodeTcKernel<kHeadDim, kGroup, kKeyWarps, kStages>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      e != cudaSuccess) {
    return e;
  }
  if (p.resident_blocks_out != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(p.resident_blocks_out, kernel, kKeyWarps * 32, kSmem);
  }
  const int subgroups = p.num_heads / p.kv_heads / kGroup;
  return LaunchKernel(kernel, dim3(static_cast<unsigned>(p.key_splits), p.kv_heads * subgroups, p.batch),
                      dim3(kKeyWarps * 32), kSmem, stream, p.dependent, p);
}

}  // namespace decode_tc
}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_DECODE_TC_KERNEL_CUH_
