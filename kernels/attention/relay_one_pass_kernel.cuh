// Relay attention's one-pass kernel (relay_launch.h, RelayOnePassArgs): a whole relay
// decode, system part and context part, in one warp's online softmax. A warp owns
// 16 / kGroup rows of one group and one KV head, so its 16 tensor-core rows are all real
// (the rows' kGroup query heads each): it streams its part of the group's prefix once for
// all of them (full tiles, as the system part's kernel), then each row's own keys, the
// other rows masked out (one real row in kGroup of the tile's, as the tensor-core decode
// runs), through the same cp.async stages. No second kernel for the system part, and one
// merge of the parts along the keys (none with one part). Plain CUDA C++ (no Abseil).
#ifndef STRATA_KERNELS_ATTENTION_RELAY_ONE_PASS_KERNEL_CUH_
#define STRATA_KERNELS_ATTENTION_RELAY_ONE_PASS_KERNEL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/attention/relay_launch.h"
#include "kernels/cuda_device.cuh"

namespace strata::kernels::internal {
namespace relay_one_pass {

// Shared memory a warp (a block): its stages of K and V tiles of kKeyTile keys (the Q
// fragments live in registers).
template <int kHeadDim, int kKeyTile, int kStages>
constexpr int SmemBytes() {
  return 2 * kStages * kKeyTile * (kHeadDim + 8) * 2;
}

// One key range a warp streams: the group's prefix (segment 0) or one row's own keys
// (segment 1 + j for the warp's row j), its pages from `first` in `indices`, `len` keys,
// and this part's tiles [tile, end).
struct Segment {
  const int32_t* indices;
  int first, len, tile, end;
};

// One block, one warp, per (chunk of 16 / kGroup rows, KV head and part, group): grid
// chunks x (kv_heads * parts) x (groups + 1 where rows follow the grouped ones, which
// have no prefix). A chunk past its group's rows exits at once.
template <int kHeadDim, int kGroup, int kKeyTile, int kStages>
__global__ void __launch_bounds__(32) RelayOnePassKernel(const RelayOnePassArgs a) {
  static_assert(16 % kGroup == 0 && kStages >= 2 && kHeadDim <= 128 && kKeyTile % 16 == 0 && kKeyTile <= 64);
  constexpr int kRows = 16 / kGroup;  // rows a warp
  extern __shared__ __align__(16) uint16_t smem[];
  using prefill_tc::LdMatrixX4;
  using prefill_tc::LdMatrixX4Trans;
  constexpr int kKeysPerLane = (kKeyTile + 31) / 32;  // keys whose offsets a lane looks up
  using prefill_tc::Mma;
  using prefill_tc::PackBf16;
  constexpr int kStride = kHeadDim + 8;
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kDimSteps = kHeadDim / 16;
  constexpr int kKeyFrags = kKeyTile / 8;
  constexpr int kDimFrags = kHeadDim / 8;
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x;
  const int chunk = blockIdx.x, kvh = blockIdx.y % a.kv_heads, part = blockIdx.y / a.kv_heads, g = blockIdx.z;
  const bool grouped = g < a.groups;
  const int row_begin = grouped ? a.group_rows[g] : a.grouped_rows;
  const int row_end = grouped ? a.group_rows[g + 1] : a.rows;
  const int first_row = row_begin + chunk * kRows;
  if (first_row >= row_end) return;
  const int rows = min(kRows, row_end - first_row);
  const int hb = kvh * kGroup;  // the KV head's first query head
  const int64_t row_elems = int64_t{a.kv_heads} * kHeadDim;

  // The prefix's pages (every lane), and row `lane`'s own (lanes below `rows`).
  int pre_first = 0, pre_len = 0, own_first = 0, own_len = 0;
  if (grouped) {
    pre_first = a.pre_indptr[g];
    const int pages = a.pre_indptr[g + 1] - pre_first;
    pre_len = pages == 0 ? 0 : (pages - 1) * a.page_size + a.pre_last[g];
  }
  if (lane < rows) {
    const int r = first_row + lane;
    own_first = a.ctx_indptr[r];
    const int pages = a.ctx_indptr[r + 1] - own_first;
    own_len = pages == 0 ? 0 : (pages - 1) * a.page_size + a.ctx_last[r];
  }
  auto segment = [&](int s) {  // s warp-uniform
    Segment seg{a.pre_indices, pre_first, pre_len, 0, 0};
    const int own_first_s = __shfl_sync(kAll, own_first, s > 0 ? s - 1 : 0);
    const int own_len_s = __shfl_sync(kAll, own_len, s > 0 ? s - 1 : 0);
    if (s > 0) seg = Segment{a.ctx_indices, own_first_s, own_len_s, 0, 0};
    const int tiles = (seg.len + kKeyTile - 1) / kKeyTile, per = (tiles + a.parts - 1) / a.parts;
    seg.tile = min(tiles, part * per);
    seg.end = min(tiles, seg.tile + per);
    return seg;
  };
  // Moves (s, seg) on to the next segment with tiles left in this part (s == rows and
  // seg empty once there are none).
  auto settle = [&](int& s, Segment& seg) {
    while (seg.tile >= seg.end && s < rows) seg = segment(++s);
  };
  int total = 0;  // the warp's tiles over all its segments
  for (int s = 0; s <= rows; ++s) {
    const Segment seg = segment(s);
    total += seg.end - seg.tile;
  }

  uint16_t* s_k = smem;  // [kStages][kKeyTile][kStride]
  uint16_t* s_v = s_k + kStages * kKeyTile * kStride;

  // The copies: lane t looks up keys t (and t + 32) of the next tile an iteration ahead,
  // and every copy takes its key's offset from that lane by a shuffle (as
  // decode_tc_kernel.cuh). The page numbers come from a window of the segment's page list
  // that the warp holds in registers (lane L: slots base + L and base + 32 + L), loaded
  // 32 pages ahead, so that no tile waits on a load of its page numbers (a wait of the
  // memory's latency every tile otherwise, which bounded the kernel's rate).
  int is = 0;
  Segment iseg = segment(0);
  settle(is, iseg);
  int win_base = 0, win = 0, win_next = 0;
  auto load_window = [&](const Segment& seg, int base) {
    const int pages = (seg.len + a.page_size - 1) / a.page_size, slot = base + lane;
    return slot < pages ? seg.indices[seg.first + slot] : 0;
  };
  // Moves the window to the tile seg.tile: afresh on a new segment or a jump, else by 32
  // slots once the tile starts past the first half (the next half loaded then, ahead).
  auto move_window = [&](const Segment& seg, bool fresh) {
    const int first_slot = seg.tile * kKeyTile / a.page_size;
    if (fresh || first_slot < win_base || first_slot - win_base >= 64) {
      win_base = first_slot;
      win = load_window(seg, win_base);
      win_next = load_window(seg, win_base + 32);
    } else if (first_slot - win_base >= 32) {
      win_base += 32;
      win = win_next;
      win_next = load_window(seg, win_base + 32);
    }
  };
  int64_t row_ahead[kKeysPerLane] = {};
  auto fetch_rows = [&](const Segment& seg, bool fresh) {
    move_window(seg, fresh);
#pragma unroll
    for (int k = 0; k < kKeysPerLane; ++k) {
      const int first = seg.tile * kKeyTile, t = first + lane + 32 * k, at = t < seg.len ? t : first;
      const int slot = at / a.page_size, rel = slot - win_base;
      const int lo = __shfl_sync(kAll, win, rel & 31), hi = __shfl_sync(kAll, win_next, rel & 31);
      const int page = rel < 32 ? lo : rel < 64 ? hi : seg.indices[seg.first + slot];  // tiles wider than it
      row_ahead[k] = (int64_t{page} * a.page_size + at % a.page_size) * row_elems + int64_t{kvh} * kHeadDim;
    }
  };
  auto issue = [&](int i, int buf) {
    if (i < total) {
      uint16_t* dk = s_k + buf * kKeyTile * kStride;
      uint16_t* dv = s_v + buf * kKeyTile * kStride;
#pragma unroll
      for (int j = 0; j < kKeyTile * kChunks / 32; ++j) {
        // Copy j's rows are (j * 32 / kChunks) .. + 32 / kChunks - 1: all in one lane-block of 32.
        constexpr int kRowsPerStep = 32 / kChunks;
        const int copy = lane + j * 32, row = copy / kChunks, c = copy % kChunks;
        const bool valid = iseg.tile * kKeyTile + row < iseg.len;
        const int64_t at = __shfl_sync(kAll, row_ahead[j * kRowsPerStep / 32], row % 32) + c * 8;
        CpAsync16(dk + row * kStride + c * 8, a.k_pages + at, valid);
        CpAsync16(dv + row * kStride + c * 8, a.v_pages + at, valid);
      }
      CpAsyncCommit();
      ++iseg.tile;
      const int was = is;
      settle(is, iseg);
      if (i + 1 < total) fetch_rows(iseg, is != was);
    } else {
      CpAsyncCommit();  // an empty group keeps the wait counts uniform
    }
  };
  if (total > 0) {
    fetch_rows(iseg, true);
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(i, i);
  }

  // Q as the A fragments of every k-step: tensor-core row r is head hb + r % kGroup of the
  // warp's row r / kGroup (zero past its rows); lane holds rows lane / 4 and lane / 4 + 8,
  // columns 2 (lane % 4) + {0, 1} and 8 more.
  uint32_t qa[kDimSteps][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = (lane >> 2) + h * 8, j = r / kGroup;
    const float* q_row = a.q + (int64_t{first_row + min(j, rows - 1)} * a.num_heads + hb + r % kGroup) * kHeadDim;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float2 v = *reinterpret_cast<const float2*>(q_row + ks * 16 + half * 8 + (lane & 3) * 2);
        if (j >= rows) v = make_float2(0.0f, 0.0f);
        qa[ks][h + 2 * half] = PackBf16(v.x, v.y);
      }
    }
  }

  const float scale_log2 = a.scale * prefill_tc::kLog2e;
  float o[kDimFrags][4];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int d = 0; d < kDimFrags; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;

  int cs = 0;
  Segment cseg = segment(0);
  settle(cs, cseg);
  for (int i = 0; i < total; ++i) {
    const int buf = i % kStages;
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
#pragma unroll
      for (int n2 = 0; n2 < kKeyFrags / 2; ++n2) {
        uint32_t kb[4];
        LdMatrixX4(kb, k_tile + (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * kStride + ks * 16 + ((lane >> 3) & 1) * 8);
        Mma(s[2 * n2], qa[ks], kb[0], kb[1]);
        Mma(s[2 * n2 + 1], qa[ks], kb[2], kb[3]);
      }
    }
    // Keys past the range's end, and (a row's own keys) the other rows' tensor-core rows.
    const int key0 = cseg.tile * kKeyTile;
    const bool tail = key0 + kKeyTile > cseg.len;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (lane >> 2) + h * 8;
      const bool other_row = cs > 0 && r / kGroup != cs - 1;
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (other_row || (tail && key0 + n * 8 + (lane & 3) * 2 + e >= cseg.len)) s[n][2 * h + e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 2));
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
    __syncwarp();  // done with buf before it is refilled
    ++cseg.tile;
    settle(cs, cseg);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(kAll, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(kAll, row_sum[h], 2);
  }

  // Each real tensor-core row: to out (one part) or to its part's workspace row.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = (lane >> 2) + h * 8, j = r / kGroup;
    if (j >= rows) continue;
    const int64_t b = first_row + j, head = hb + r % kGroup;
    const float sum = row_sum[h], inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int64_t part_row = (b * a.parts + part) * a.num_heads + head;
    float* dst = (a.parts > 1 ? a.ws_o + part_row * kHeadDim : a.out + (b * a.num_heads + head) * kHeadDim) +
                 (lane & 3) * 2;
#pragma unroll
    for (int d = 0; d < kDimFrags; ++d) {
      *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
    }
    if (a.parts > 1 && (lane & 3) == 0) a.ws_lse[part_row] = sum > 0.0f ? row_max[h] * a.scale + logf(sum) : -INFINITY;
  }
}

template <int kHeadDim, int kGroup, int kKeyTile, int kStages>
cudaError_t Launch(const RelayOnePassArgs& a, cudaStream_t stream) {
  constexpr int kSmem = SmemBytes<kHeadDim, kKeyTile, kStages>();
  auto* kernel = RelayOnePassKernel<kHeadDim, kGroup, kKeyTile, kStages>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      e != cudaSuccess) {
    return e;
  }
  if (a.resident_blocks_out != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(a.resident_blocks_out, kernel, 32, kSmem);
  }
  const unsigned z = static_cast<unsigned>(a.groups + (a.rows > a.grouped_rows ? 1 : 0));
  kernel<<<dim3(static_cast<unsigned>(a.chunks), static_cast<unsigned>(a.kv_heads * a.parts), z), 32, kSmem,
           stream>>>(a);
  return cudaGetLastError();
}

}  // namespace relay_one_pass
}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_RELAY_ONE_PASS_KERNEL_CUH_
