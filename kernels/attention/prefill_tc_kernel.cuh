// The tensor-core paged prefill kernel (FlashAttention-2 on mma.sync m16n8k16, bf16
// operands, fp32 accumulation) as templates, for prefill.cu's dispatch and the
// prefill_tc_hd*.cu files that instantiate them a few head dims each (so nvcc compiles
// them in parallel). Plain CUDA C++ (no Abseil).
#ifndef STRATA_KERNELS_ATTENTION_PREFILL_TC_KERNEL_CUH_
#define STRATA_KERNELS_ATTENTION_PREFILL_TC_KERNEL_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/prefill_launch.h"
#include "kernels/cuda_device.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {
namespace prefill_tc {

constexpr float kLog2e = 1.4426950408889634f;


// Two floats rounded to bf16 (nearest, ties to even), lo in the low half.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const uint16_t* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const uint16_t* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// d += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Where a block of the prefill kernels works (PrefillTcBlock and the wgmma form,
// prefill_wgmma_ws.cu): its KV head and first query head, its sequence's new rows and keys, and
// its range of key tiles.
struct BlockTile {
  int kvh, hb;             // the KV head; the block's first query head
  int split;               // its part along the keys
  int q_begin, new_tokens;  // the sequence's first query row and its new tokens
  int m0;                  // the tile's first packed row
  int first_page, len;     // the sequence's first page (in indices) and its keys
  // A query's position, the last key it sees: first_pos + pos_step * token. Causal, new
  // token t is at len - new_tokens + t; with all_keys (relay attention's system part) every
  // query sits after the last key.
  int first_pos, pos_step;
  int kt_begin, key_tiles;  // this block's key tiles: [kt_begin, key_tiles)
  int min_pos;              // the tile's earliest query position
};

// The block (bx, by, b) of a grid grid_x wide, whose tiles are kTileRows packed rows
// (kGroup query heads of a KV head a token) and kKeyTile keys. Blocks take the heaviest
// (last) query tiles first. False when the tile lies past the sequence's new rows.
template <int kGroup, int kTileRows, int kKeyTile>
__device__ __forceinline__ bool LocateBlock(const PrefillTcParams& p, int bx, int by, int b, int grid_x,
                                            BlockTile& t) {
  const int group = p.num_heads / p.kv_heads, subgroups = group / kGroup;
  t.kvh = by / subgroups;
  t.hb = t.kvh * group + (by % subgroups) * kGroup;
  t.split = bx % p.key_splits;
  const int tile = grid_x / p.key_splits - 1 - bx / p.key_splits;
  // Without qo_indptr (decode), row b is sequence b's one new token, the last of its keys.
  // The sequence's pages are read before the early return below, so that both rounds of
  // loads are in flight at once (the block's first K/V copies wait on them).
  t.q_begin = p.qo_indptr != nullptr ? p.qo_indptr[b] : b;
  t.new_tokens = p.qo_indptr != nullptr ? p.qo_indptr[b + 1] - t.q_begin : 1;
  t.first_page = p.indptr[b];
  const int pages = p.indptr[b + 1] - t.first_page, last_page_len = p.last_page_len[b];
  t.m0 = tile * kTileRows;
  if (t.m0 >= t.new_tokens * kGroup) return false;
  // A decode row's sequence may be empty (no key tiles: its output is zero, its lse -inf).
  t.len = pages == 0 ? 0 : (pages - 1) * p.page_size + last_page_len;
  t.first_pos = p.all_keys ? t.len - 1 : t.len - t.new_tokens;
  t.pos_step = p.all_keys ? 0 : 1;
  const int last_token = min(t.new_tokens - 1, (t.m0 + kTileRows - 1) / kGroup);
  const int all_key_tiles = (t.first_pos + t.pos_step * last_token + kKeyTile) / kKeyTile;
  const int split_tiles = (all_key_tiles + p.key_splits - 1) / p.key_splits;
  t.kt_begin = min(all_key_tiles, t.split * split_tiles);
  t.key_tiles = min(all_key_tiles, t.kt_begin + split_tiles);
  t.min_pos = t.first_pos + t.pos_step * (t.m0 / kGroup);
  return true;
}

// A block's epilogue for one of its query rows, packed row m (PrefillTcBlock's and the
// wgmma form's): the row's output normalised by its softmax sum and its lse, into the
// part's row of ws_o / ws_lse (split along the keys) or into out / lse. The quad of lanes
// sharing the row holds columns 8d + 2 (lane & 3) and the next, pair(d) giving them
// unnormalised; `sum` is this lane's share of the row's sum, row_max the row's maximum
// (unscaled). Rows past the sequence's new tokens are skipped.
template <int kHeadDim, int kGroup, class Pair>
__device__ __forceinline__ void StoreRow(const PrefillTcParams& p, const BlockTile& t, int m, int lane, float row_max,
                                         float sum, Pair pair) {
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  const int token = m / kGroup, g = m % kGroup;
  if (token >= t.new_tokens) return;
  const int64_t head_row = (int64_t{t.q_begin} + token) * p.num_heads + t.hb + g;
  // Into parts: the part's row of the workspace (row, part, head).
  const int row_parts = p.ws_row_parts > 0 ? p.ws_row_parts : p.key_splits;
  const int64_t part_row = ((int64_t{t.q_begin} + token) * row_parts + p.ws_first_part + t.split) * p.num_heads + t.hb + g;
  float* dst = (p.ws_o != nullptr ? p.ws_o + part_row * kHeadDim : p.out + head_row * kHeadDim) + (lane & 3) * 2;
  // sum >= 1 when the part has keys (the row's maximum contributes exp2(0)); 0 when empty.
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
    const float2 v = pair(d);
    *reinterpret_cast<float2*>(dst + d * 8) = make_float2(v.x * inv, v.y * inv);
  }
  if ((lane & 3) == 0) {
    const float part_lse = sum > 0.0f ? row_max * p.scale + logf(sum) : -INFINITY;
    if (p.ws_o != nullptr) {
      p.ws_lse[part_row] = part_lse;
    } else if (p.lse != nullptr) {
      p.lse[head_row] = part_lse;
    }
  }
}

template <int kHeadDim>
constexpr int SmemBytes(int tile_rows, int key_tile, int stages) {
  return (tile_rows + 2 * stages * key_tile) * (kHeadDim + 8) * 2;  // Q tile + `stages` K and V tiles
}

// One block per (query tile, KV head and subgroup, sequence). The tile packs kGroup query
// heads of the KV head's group (all of them, or one of group / kGroup subgroups) into its
// rows: packed row m is new token m / kGroup of the sequence, query head hb + m % kGroup,
// so K and V are read once for the whole group (once per subgroup past 8 heads). Each warp owns
// kMTiles * 16 rows: with two 16-row MMA tiles every K/V fragment read from shared memory
// feeds twice the MMAs (shared-memory bandwidth, not the tensor cores, bounds the one-tile
// form), and Q's fragments are re-read from shared memory; with one they stay in
// registers. K/V tiles of kKeyTile keys are gathered from the pages into shared memory with
// cp.async, kStages - 1 tiles ahead of the one in use (the one-warp decode form's tiles as
// tensor-map boxes, every stage in flight, measured no faster: docs/BENCHMARKS.md). Scores
// are kept unscaled; the online softmax works in log2 units (exp2((s - max) * scale *
// log2 e)). Key tiles past the tile's last
// query position are skipped; only tiles that cross the diagonal are masked. Blocks run
// the heaviest (last) query tiles first.
//
// Shared-memory rows are padded by 16 bytes, so the 8 rows an ldmatrix reads fall in
// different banks.
//
// As a device function (for PagedPrefillTcKernel, and relay attention's fused launch that
// runs it beside decode blocks): the block (bx, by, b) of a grid grid_x wide; `smem` holds
// SmemBytes<kHeadDim>(...) bytes, 16-byte aligned. Every thread of the block must call it;
// it ends with no barrier pending and smem free.
template <int kHeadDim, int kGroup, int kWarps, int kMTiles, int kKeyTile, int kStages>
__device__ __forceinline__ void PrefillTcBlock(const PrefillTcParams& p, int bx, int by, int b, int grid_x,
                                               uint16_t* smem) {
  static_assert(kStages >= 2);
  constexpr int kThreads = kWarps * 32;
  constexpr int kWarpRows = 16 * kMTiles;
  constexpr int kTileRows = kWarpRows * kWarps;
  // Q's fragments stay in registers with one MMA tile, except at head_dim 256 where the
  // output accumulator alone takes 128 registers a thread, and in the one-warp form (the
  // decode's: one warp's ldmatrix of Q per key tile is cheap, and it keeps the form at 171
  // registers, 4 blocks an SM being what its shared memory allows anyway).
  constexpr bool kQInRegisters = kMTiles == 1 && kHeadDim <= 128 && kWarps > 1;
  constexpr int kStride = kHeadDim + 8;     // bf16 per shared-memory row
  constexpr int kChunks = kHeadDim / 8;     // 16-byte chunks per row
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of Q K^T
  constexpr int kKeyFrags = kKeyTile / 8;   // 8-key column blocks of S
  constexpr int kDimFrags = kHeadDim / 8;   // 8-dim column blocks of O
  uint16_t* s_q = smem;
  uint16_t* s_k = s_q + kTileRows * kStride;           // [kStages][kKeyTile][kStride]
  uint16_t* s_v = s_k + kStages * kKeyTile * kStride;  // [kStages][kKeyTile][kStride]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  BlockTile at;
  if (!LocateBlock<kGroup, kTileRows, kKeyTile>(p, bx, by, b, grid_x, at)) return;
  const int kvh = at.kvh, hb = at.hb, q_begin = at.q_begin, new_tokens = at.new_tokens, m0 = at.m0;
  const int first_page = at.first_page, len = at.len, first_pos = at.first_pos, pos_step = at.pos_step;
  const int kt_begin = at.kt_begin, key_tiles = at.key_tiles, min_pos = at.min_pos;
  const int64_t row_elems = int64_t{p.kv_heads} * kHeadDim;

  // Each thread copies the same kCopies (row, chunk) pairs of every K/V tile (the last
  // round partly, when the tile's chunks do not divide among the threads: head_dim 80 with
  // 8 warps); the pages of the tile after next are fetched into registers an iteration
  // ahead, so the copies are never held up by the page-table lookup.
  constexpr int kTileChunks = kKeyTile * kChunks;
  constexpr int kCopies = (kTileChunks + kThreads - 1) / kThreads;
  // The one-warp form (the decode's) has a tile row per lane: each lane looks up its row of
  // the next tile an iteration ahead, and every copy takes its row's offset from that lane
  // by a shuffle — one page-table read a lane per tile, none on a copy's path.
  constexpr bool kRowsByLane = kWarps == 1 && kKeyTile == 32;
  constexpr bool kPagesAhead = !kRowsByLane && kCopies <= 8;
  int pages_ahead[kPagesAhead ? kCopies : 1];
  int64_t row_ahead = 0;  // kRowsByLane: the element offset of the lane's row of the next tile
  auto page_of = [&](int t) { return p.indices[first_page + (t < len ? t : 0) / p.page_size]; };
  auto fetch_pages = [&](int kt) {
    if constexpr (kRowsByLane) {
      const int t = kt * kKeyTile + lane;
      row_ahead = (int64_t{page_of(t)} * p.page_size + (t < len ? t : 0) % p.page_size) * row_elems +
                  int64_t{kvh} * kHeadDim;
    } else if constexpr (kPagesAhead) {
#pragma unroll
      for (int j = 0; j < kCopies; ++j) {
        const int t = kt * kKeyTile + min(threadIdx.x + j * kThreads, kTileChunks - 1) / kChunks;
        pages_ahead[j] = page_of(t);
      }
    }
  };
  auto load_kv = [&](int kt, int buf) {  // uses the pages (rows) fetched for kt
    uint16_t* dk = s_k + buf * kKeyTile * kStride;
    uint16_t* dv = s_v + buf * kKeyTile * kStride;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int copy = threadIdx.x + j * kThreads;
      if (kTileChunks % kThreads != 0 && copy >= kTileChunks) break;  // never in the one-warp form
      const int row = copy / kChunks, chunk = copy % kChunks;
      const int t = kt * kKeyTile + row;
      const bool valid = t < len;
      int64_t at;
      if constexpr (kRowsByLane) {
        at = __shfl_sync(0xffffffffu, row_ahead, row) + chunk * 8;
      } else {
        const int page = kPagesAhead ? pages_ahead[kPagesAhead ? j : 0] : page_of(t);
        const int64_t slot = int64_t{page} * p.page_size + (valid ? t : 0) % p.page_size;
        at = slot * row_elems + int64_t{kvh} * kHeadDim + chunk * 8;
      }
      CpAsync16(dk + row * kStride + chunk * 8, p.k_pages + at, valid);
      CpAsync16(dv + row * kStride + chunk * 8, p.v_pages + at, valid);
    }
    CpAsyncCommit();
  };
  // Copies tile t into buffer buf and looks up the next tile's pages (an empty group past
  // the last tile keeps the wait counts uniform).
  auto issue = [&](int t, int buf) {
    if (t < key_tiles) {
      load_kv(t, buf);
      if (t + 1 < key_tiles) fetch_pages(t + 1);
    } else {
      CpAsyncCommit();
    }
  };
  if (kt_begin < key_tiles) {
    fetch_pages(kt_begin);
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(kt_begin + i, i);
  }

  // Q tile -> bf16 in shared memory (rows past the sequence's new tokens are zero).
#pragma unroll 4
  for (int i = threadIdx.x; i < kTileRows * kHeadDim / 4; i += kThreads) {
    const int row = i / (kHeadDim / 4), col = i % (kHeadDim / 4) * 4;
    const int m = m0 + row, token = m / kGroup, g = m % kGroup;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (token < new_tokens) {
      v = *reinterpret_cast<const float4*>(
          p.q + ((int64_t{q_begin} + token) * p.num_heads + hb + g) * kHeadDim + col);
    }
    *reinterpret_cast<uint2*>(s_q + row * kStride + col) = make_uint2(PackBf16(v.x, v.y), PackBf16(v.z, v.w));
  }
  __syncthreads();
  const uint16_t* q_frag_base = s_q + (warp * kWarpRows + (lane & 15)) * kStride + (lane >> 4) * 8;
  uint32_t qf[kQInRegisters ? kDimSteps : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) LdMatrixX4(qf[ks], q_frag_base + ks * 16);
  }

  // This thread's rows: lane / 4 and lane / 4 + 8 of each of the warp's 16-row MMA tiles.
  int query_pos[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      query_pos[mt][h] = first_pos + pos_step * ((m0 + warp * kWarpRows + mt * 16 + (lane >> 2) + h * 8) / kGroup);
    }
  }
  const float scale_log2 = p.scale * kLog2e;
  float o[kMTiles][kDimFrags][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int d = 0; d < kDimFrags; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }

  for (int kt = kt_begin; kt < key_tiles; ++kt) {
    const int buf = (kt - kt_begin) % kStages;
    // Into the buffer of tile kt - 1, released by the barrier that ended it.
    issue(kt + kStages - 1, (kt - kt_begin + kStages - 1) % kStages);
    CpAsyncWait<kStages - 1>();  // tile kt has landed
    __syncthreads();
    const uint16_t* k_tile = s_k + buf * kKeyTile * kStride;
    const uint16_t* v_tile = s_v + buf * kKeyTile * kStride;

    float s[kMTiles][kKeyFrags][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      uint32_t qa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (kQInRegisters) {
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[mt][i] = qf[ks][i];
        } else {
          LdMatrixX4(qa[mt], q_frag_base + mt * 16 * kStride + ks * 16);
        }
      }
#pragma unroll
      for (int n2 = 0; n2 < kKeyFrags / 2; ++n2) {
        uint32_t kb[4];
        LdMatrixX4(kb, k_tile + (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * kStride + ks * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Mma(s[mt][2 * n2], qa[mt], kb[0], kb[1]);
          Mma(s[mt][2 * n2 + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }
    if (kt * kKeyTile + kKeyTile - 1 > min_pos) {  // the tile crosses the diagonal
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = kt * kKeyTile + n * 8 + (lane & 3) * 2 + (e & 1);
            if (key > query_pos[mt][e >> 1]) s[mt][n][e] = -INFINITY;
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_max[mt][h];
#pragma unroll
        for (int n = 0; n < kKeyFrags; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_use = mx == -INFINITY ? 0.0f : mx;
        const float alpha = FastExp2((row_max[mt][h] - m_use) * scale_log2);
        row_max[mt][h] = mx;
        const float bias = m_use * scale_log2;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kKeyFrags; ++n) {
          s[mt][n][2 * h] = FastExp2(fmaf(s[mt][n][2 * h], scale_log2, -bias));
          s[mt][n][2 * h + 1] = FastExp2(fmaf(s[mt][n][2 * h + 1], scale_log2, -bias));
          sum += s[mt][n][2 * h] + s[mt][n][2 * h + 1];
        }
        row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
#pragma unroll
        for (int d = 0; d < kDimFrags; ++d) {
          o[mt][d][2 * h] *= alpha;
          o[mt][d][2 * h + 1] *= alpha;
        }
      }
    }
    // O += P V: the S accumulators of two adjacent 8-key blocks are the A fragment of a
    // 16-key step.
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = PackBf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = PackBf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = PackBf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = PackBf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int d2 = 0; d2 < kDimFrags / 2; ++d2) {
        uint32_t vb[4];
        LdMatrixX4Trans(vb, v_tile + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + d2 * 16 +
                                (lane >> 4) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Mma(o[mt][2 * d2], pa[mt], vb[0], vb[1]);
          Mma(o[mt][2 * d2 + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with buf before the next iteration refills it
  }

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      StoreRow<kHeadDim, kGroup>(p, at, m0 + warp * kWarpRows + mt * 16 + (lane >> 2) + h * 8, lane, row_max[mt][h],
                                 row_sum[mt][h], [&](int d) { return make_float2(o[mt][d][2 * h], o[mt][d][2 * h + 1]); });
    }
  }
}

template <int kHeadDim, int kGroup, int kWarps, int kMTiles, int kKeyTile, int kStages>
__global__ void __launch_bounds__(kWarps * 32) PagedPrefillTcKernel(const PrefillTcParams p) {
  extern __shared__ __align__(16) uint16_t smem[];
  AllowDependentLaunch();
  PrefillTcBlock<kHeadDim, kGroup, kWarps, kMTiles, kKeyTile, kStages>(p, blockIdx.x, blockIdx.y, blockIdx.z,
                                                                       gridDim.x, smem);
}

template <int kHeadDim, int kGroup, int kWarps, int kMTiles, int kKeyTile, int kStages = 2>
cudaError_t LaunchTiles(const PrefillTcParams& p, cudaStream_t stream) {
  constexpr int kTileRows = 16 * kWarps * kMTiles;
  constexpr int kSmem = SmemBytes<kHeadDim>(kTileRows, kKeyTile, kStages);
  auto* kernel = PagedPrefillTcKernel<kHeadDim, kGroup, kWarps, kMTiles, kKeyTile, kStages>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      e != cudaSuccess) {
    return e;
  }
  if (p.resident_blocks_out != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(p.resident_blocks_out, kernel, kWarps * 32, kSmem);
  }
  const int64_t tiles = (int64_t{p.max_new_tokens} * kGroup + kTileRows - 1) / kTileRows;
  const int subgroups = p.num_heads / p.kv_heads / kGroup;
  return LaunchKernel(kernel, dim3(static_cast<unsigned>(tiles * p.key_splits), p.kv_heads * subgroups, p.batch),
                      dim3(kWarps * 32), kSmem, stream, p.dependent, p);
}

// The compiled forms: all four at head_dim 64 and 128 (the benchmark compares them); one
// 64-row and one 128-row form (32-key tiles, as at 128) at the other head dims, which the
// other forms map onto (256: 32-key tiles, and 128 rows as 8 warps of one MMA tile, the
// output accumulator being 128 registers a thread). The one-warp decode form up to 128.
template <int kHeadDim, int kGroup>
cudaError_t LaunchGroup(const PrefillTcParams& p, PrefillTcTiles tiles, cudaStream_t stream) {
  constexpr bool kAllForms = kHeadDim == 64 || kHeadDim == 128;
  if constexpr (kHeadDim <= 128) {
    // Three stages: one warp has two tiles in flight while it works on a third.
    if (tiles == PrefillTcTiles::k16Rows1Warp) return LaunchTiles<kHeadDim, kGroup, 1, 1, 32, 3>(p, stream);
  }
  if constexpr (kHeadDim == 256) {
    if (tiles == PrefillTcTiles::k64Rows4Warps || tiles == PrefillTcTiles::k16Rows1Warp) {
      return LaunchTiles<kHeadDim, kGroup, 4, 1, 32>(p, stream);
    }
    if (tiles != PrefillTcTiles::kAuto) return LaunchTiles<kHeadDim, kGroup, 8, 1, 32>(p, stream);
    return cudaErrorInvalidValue;
  } else if constexpr (!kAllForms) {
    if (tiles == PrefillTcTiles::k64Rows4Warps) return LaunchTiles<kHeadDim, kGroup, 4, 1, 64>(p, stream);
    if (tiles != PrefillTcTiles::kAuto) return LaunchTiles<kHeadDim, kGroup, 4, 2, 32>(p, stream);
    return cudaErrorInvalidValue;
  } else {
    switch (tiles) {
      case PrefillTcTiles::k64Rows4Warps:
        return LaunchTiles<kHeadDim, kGroup, 4, 1, 64>(p, stream);
      case PrefillTcTiles::k128Rows8Warps:
        return LaunchTiles<kHeadDim, kGroup, 8, 1, 64>(p, stream);
      case PrefillTcTiles::k128Rows4Warps:  // 32-key tiles keep head_dim 128 within the registers
        return LaunchTiles<kHeadDim, kGroup, 4, 2, kHeadDim == 128 ? 32 : 64>(p, stream);
      case PrefillTcTiles::k128Rows4Warps64Keys:
        return LaunchTiles<kHeadDim, kGroup, 4, 2, 64>(p, stream);
      case PrefillTcTiles::kAuto:
      case PrefillTcTiles::k16Rows1Warp:  // launched above
        break;
    }
    return cudaErrorInvalidValue;
  }
}

// The kernel for one head dim, every GQA subgroup size; tiles is not kAuto.
template <int kHeadDim>
cudaError_t LaunchHeadDim(const PrefillTcParams& p, PrefillTcTiles tiles, cudaStream_t stream) {
  STRATA_DISPATCH_GQA_GROUP_SIZE(GqaSubgroupSize(p.num_heads / p.kv_heads), kGroup,
                                 { return LaunchGroup<kHeadDim, kGroup>(p, tiles, stream); })
  return cudaErrorInvalidValue;
}

}  // namespace prefill_tc

// The prefill kernels of one head dim; each dispatched head dim is instantiated in one of
// the prefill_tc_hd*.cu files (and declared extern below, so no other file compiles it).
template <int kHeadDim>
cudaError_t PrefillTcForHeadDim(const PrefillTcParams& p, PrefillTcTiles tiles, cudaStream_t stream) {
  return prefill_tc::LaunchHeadDim<kHeadDim>(p, tiles, stream);
}
#define STRATA_PREFILL_TC_HEAD_DIM(SPEC, N) \
  SPEC template cudaError_t PrefillTcForHeadDim<N>(const PrefillTcParams&, PrefillTcTiles, cudaStream_t);
STRATA_PREFILL_TC_HEAD_DIM(extern, 64)
STRATA_PREFILL_TC_HEAD_DIM(extern, 80)
STRATA_PREFILL_TC_HEAD_DIM(extern, 96)
STRATA_PREFILL_TC_HEAD_DIM(extern, 128)
STRATA_PREFILL_TC_HEAD_DIM(extern, 256)

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_PREFILL_TC_KERNEL_CUH_
