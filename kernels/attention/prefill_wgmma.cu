// The tensor-core paged prefill attention on Hopper's warpgroup products (wgmma, compiled
// for sm_90a only): the form for relay attention's system part, every group's query rows
// against its shared prefix, where the arithmetic is the limit (64 rows x 4 heads against
// 8K keys: ~110 TFLOP/s on mma.sync, docs/BENCHMARKS.md). The same params, row packing,
// key splits and outputs as the mma.sync kernel (prefill_tc_kernel.cuh); head_dim 64 and
// 128. Plain CUDA C++ (no Abseil).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/attention/wgmma.cuh"
#include "kernels/cuda_device.cuh"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {
namespace prefill_wgmma {

constexpr int kKeyTile = 64;  // keys a K/V tile
constexpr int kCoreElems = 64;  // bf16 of a core matrix (8 rows of 16 bytes)

template <int kHeadDim>
constexpr int SmemBytes(int warp_groups, int stages) {
  return (64 * warp_groups + 2 * stages * kKeyTile) * kHeadDim * 2;  // Q tile + `stages` K and V tiles
}

// One block per (query tile, KV head and subgroup, sequence), as PrefillTcBlock: each of
// kWarpGroups warpgroups owns 64 packed rows of the tile. Every operand tile in shared
// memory (Q, K, V) is laid in core matrices (wgmma.cuh): 16-byte chunk c of row r at
// ((r / 8) * (head_dim / 8) + c) * 64 + (r % 8) * 8 bf16, so that the block's i-th 16-byte
// copy of a K/V tile lands at i * 8 and 8 neighbouring threads fill one core matrix. Q and
// K are read K-major (rows = queries or keys, reduced along head_dim); V, the same bytes,
// MN-major (reduced along the keys). S = Q K^T is eight (head_dim 128) 64 x 64 products;
// P, rounded to bf16 in registers, is the A operand of O += P V. K/V tiles are gathered
// from the pages with cp.async, kStages - 1 tiles ahead. The online softmax is
// PrefillTcBlock's, in log2 units.
template <int kHeadDim, int kGroup, int kWarpGroups, int kStages>
__global__ void __launch_bounds__(kWarpGroups * 128) PagedPrefillWgmmaKernel(const PrefillTcParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) uint16_t smem[];
  constexpr int kThreads = kWarpGroups * 128;
  constexpr int kTileRows = 64 * kWarpGroups;
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kTileElems = kKeyTile * kHeadDim;
  constexpr int kDimSteps = kHeadDim / 16;
  constexpr int kKeySteps = kKeyTile / 16;
  constexpr int kSFloats = kKeyTile / 2, kOFloats = kHeadDim / 2;
  constexpr uint32_t kRowBlockBytes = kChunks * 128;  // 8 rows of a tile
  constexpr int kCopies = kTileElems / 8 / kThreads;
  static_assert(kTileElems / 8 % kThreads == 0, "a K/V tile's chunks divide among the threads");
  uint16_t* s_q = smem;
  uint16_t* s_k = s_q + kTileRows * kHeadDim;       // [kStages][kTileElems]
  uint16_t* s_v = s_k + kStages * kTileElems;       // [kStages][kTileElems]

  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = tid / 32 % 4, lane = tid & 31;
  const int bx = static_cast<int>(blockIdx.x), by = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  prefill_tc::BlockTile at;
  if (!prefill_tc::LocateBlock<kGroup, kTileRows, kKeyTile>(p, bx, by, b, static_cast<int>(gridDim.x), at)) return;
  const int kvh = at.kvh, hb = at.hb, q_begin = at.q_begin, new_tokens = at.new_tokens, m0 = at.m0;
  const int first_page = at.first_page, len = at.len, first_pos = at.first_pos, pos_step = at.pos_step;
  const int kt_begin = at.kt_begin, key_tiles = at.key_tiles, min_pos = at.min_pos;
  const int64_t row_elems = int64_t{p.kv_heads} * kHeadDim;

  // Copy j of a tile takes key kCopyKey[j] (the same keys every tile) and its chunk; the
  // element offsets of the next tile's rows are looked up a tile ahead (row_at), so that no
  // copy waits for the page table.
  const int copy_chunk = tid / 8 % kChunks;
  auto copy_key = [&](int j) { return (tid + j * kThreads) % 8 + (tid + j * kThreads) / (8 * kChunks) * 8; };
  int64_t row_at[kCopies];
  auto fetch_rows = [&](int kt) {
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int t = kt * kKeyTile + copy_key(j), at_token = t < len ? t : 0;
      const int page = p.indices[first_page + at_token / p.page_size];
      row_at[j] = (int64_t{page} * p.page_size + at_token % p.page_size) * row_elems + int64_t{kvh} * kHeadDim +
                  copy_chunk * 8;
    }
  };
  auto load_kv = [&](int kt, int buf) {
    uint16_t* dk = s_k + buf * kTileElems;
    uint16_t* dv = s_v + buf * kTileElems;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int i = tid + j * kThreads;  // the tile's i-th chunk in shared-memory order
      const bool valid = kt * kKeyTile + copy_key(j) < len;
      CpAsync16(dk + i * 8, p.k_pages + row_at[j], valid);
      CpAsync16(dv + i * 8, p.v_pages + row_at[j], valid);
    }
    CpAsyncCommit();
  };
  auto issue = [&](int t, int buf) {  // an empty group past the last tile keeps the wait counts uniform
    if (t < key_tiles) {
      load_kv(t, buf);
      if (t + 1 < key_tiles) fetch_rows(t + 1);
    } else {
      CpAsyncCommit();
    }
  };
  if (kt_begin < key_tiles) fetch_rows(kt_begin);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(kt_begin + i, i);

  // Q tile -> bf16 core matrices (rows past the sequence's new tokens are zero).
  for (int i = tid; i < kTileRows * kHeadDim / 4; i += kThreads) {
    const int row = i / (kHeadDim / 4), col = i % (kHeadDim / 4) * 4;
    const int m = m0 + row, token = m / kGroup, g = m % kGroup;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (token < new_tokens) {
      v = *reinterpret_cast<const float4*>(p.q + ((int64_t{q_begin} + token) * p.num_heads + hb + g) * kHeadDim + col);
    }
    uint16_t* dst = s_q + (row / 8 * kChunks + col / 8) * kCoreElems + row % 8 * 8 + col % 8;
    *reinterpret_cast<uint2*>(dst) = make_uint2(prefill_tc::PackBf16(v.x, v.y), prefill_tc::PackBf16(v.z, v.w));
  }
  wgmma::FenceSharedForAsync();
  __syncthreads();
  const uint16_t* q_tile = s_q + wg * 64 * kHeadDim;

  // This thread's rows: lane / 4 and lane / 4 + 8 of its warp's 16.
  int query_pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    query_pos[h] = first_pos + pos_step * ((m0 + wg * 64 + warp * 16 + lane / 4 + h * 8) / kGroup);
  }
  const float scale_log2 = p.scale * prefill_tc::kLog2e;
  float o[kOFloats];
#pragma unroll
  for (int i = 0; i < kOFloats; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  for (int kt = kt_begin; kt < key_tiles; ++kt) {
    const int buf = (kt - kt_begin) % kStages;
    issue(kt + kStages - 1, (kt - kt_begin + kStages - 1) % kStages);  // into the buffer the last barrier freed
    CpAsyncWait<kStages - 1>();
    wgmma::FenceSharedForAsync();
    __syncthreads();
    const uint16_t* k_tile = s_k + buf * kTileElems;
    const uint16_t* v_tile = s_v + buf * kTileElems;

    float s[kSFloats];
#pragma unroll
    for (int i = 0; i < kSFloats; ++i) s[i] = 0.0f;
    wgmma::PinOperands(s);
    wgmma::Fence();
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      wgmma::WgmmaSS64(s, wgmma::Desc(q_tile + ks * 2 * kCoreElems, 128, kRowBlockBytes),
                       wgmma::Desc(k_tile + ks * 2 * kCoreElems, 128, kRowBlockBytes), 1);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::PinOperands(s);

    if (kt * kKeyTile + kKeyTile - 1 > min_pos) {  // the tile crosses the diagonal (or the end)
#pragma unroll
      for (int i = 0; i < kSFloats; ++i) {
        const int key = kt * kKeyTile + i / 4 * 8 + (lane & 3) * 2 + (i & 1);
        if (key > query_pos[i % 4 / 2]) s[i] = -INFINITY;
      }
    }
    float alphas[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int j = 0; j < kKeyTile / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_use = mx == -INFINITY ? 0.0f : mx;
      const float alpha = FastExp2((row_max[h] - m_use) * scale_log2);
      row_max[h] = mx;
      const float bias = m_use * scale_log2;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeyTile / 8; ++j) {
        s[4 * j + 2 * h] = FastExp2(fmaf(s[4 * j + 2 * h], scale_log2, -bias));
        s[4 * j + 2 * h + 1] = FastExp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -bias));
        sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
      }
      row_sum[h] = row_sum[h] * alpha + sum;
      alphas[h] = alpha;
    }
    // Past the first tiles a row's maximum seldom moves: the warp skips the rescale of O
    // when none of its rows' did (alpha exactly 1).
    if (__any_sync(0xffffffffu, alphas[0] != 1.0f || alphas[1] != 1.0f)) {
#pragma unroll
      for (int d = 0; d < kHeadDim / 8; ++d) {
        o[4 * d] *= alphas[0];
        o[4 * d + 1] *= alphas[0];
        o[4 * d + 2] *= alphas[1];
        o[4 * d + 3] *= alphas[1];
      }
    }
    // O += P V: the S accumulators of two adjacent 8-key blocks are the A fragment of a
    // 16-key step.
    uint32_t pa[kKeySteps][4];
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = prefill_tc::PackBf16(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    }
    wgmma::PinOperands(o);
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      const uint64_t v_desc = wgmma::Desc(v_tile + kk * 2 * kChunks * kCoreElems, kRowBlockBytes, 128);
      if constexpr (kHeadDim == 128) {
        wgmma::WgmmaRS128(o, pa[kk], v_desc, 1);
      } else {
        wgmma::WgmmaRS64(o, pa[kk], v_desc, 1);
      }
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::PinOperands(o);
    __syncthreads();  // every warpgroup is done with buf before the next iteration refills it
  }
  CpAsyncWait<0>();  // the empty groups past the end

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    prefill_tc::StoreRow<kHeadDim, kGroup>(p, at, m0 + wg * 64 + warp * 16 + lane / 4 + h * 8, lane, row_max[h],
                                           row_sum[h],
                                           [&](int d) { return make_float2(o[4 * d + 2 * h], o[4 * d + 2 * h + 1]); });
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <int kHeadDim, int kGroup, int kWarpGroups, int kStages>
cudaError_t Launch(const PrefillTcParams& p, cudaStream_t stream) {
  constexpr int kSmem = SmemBytes<kHeadDim>(kWarpGroups, kStages);
  constexpr int kTileRows = 64 * kWarpGroups;
  auto* kernel = PagedPrefillWgmmaKernel<kHeadDim, kGroup, kWarpGroups, kStages>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      e != cudaSuccess) {
    return e;
  }
  if (p.resident_blocks_out != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(p.resident_blocks_out, kernel, kWarpGroups * 128, kSmem);
  }
  const int64_t tiles = (int64_t{p.max_new_tokens} * kGroup + kTileRows - 1) / kTileRows;
  const int subgroups = p.num_heads / p.kv_heads / kGroup;
  kernel<<<dim3(static_cast<unsigned>(tiles * p.key_splits), p.kv_heads * subgroups, p.batch), kWarpGroups * 128,
           kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t LaunchHeadDim(const PrefillTcParams& p, int warp_groups, cudaStream_t stream) {
  STRATA_DISPATCH_GQA_GROUP_SIZE(GqaSubgroupSize(p.num_heads / p.kv_heads), kGroup, {
    // One warpgroup: three stages (112 KB at head_dim 128, two blocks an SM); two: two stages.
    return warp_groups == 2 ? Launch<kHeadDim, kGroup, 2, 2>(p, stream) : Launch<kHeadDim, kGroup, 1, 3>(p, stream);
  })
  return cudaErrorInvalidValue;
}

}  // namespace prefill_wgmma

bool PrefillWgmmaSupported(int head_dim) {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;
  }
  return major == 9 && minor == 0 && (head_dim == 64 || head_dim == 128);
}

cudaError_t PagedPrefillAttentionWgmmaAsync(const PrefillTcParams& p, int warp_groups, cudaStream_t stream) {
  if (warp_groups != 1 && warp_groups != 2) return cudaErrorInvalidValue;
  if (p.head_dim == 64) return prefill_wgmma::LaunchHeadDim<64>(p, warp_groups, stream);
  if (p.head_dim == 128) return prefill_wgmma::LaunchHeadDim<128>(p, warp_groups, stream);
  return cudaErrorInvalidValue;
}

}  // namespace strata::kernels::internal
