// The paged prefill attention on Hopper's warpgroup products, warp-specialised (compiled for
// sm_90a only): the form for relay attention's system part, where the arithmetic is the
// limit (64 rows x 4 heads against 8K keys). A block is three warpgroups: a producer that
// gathers the K/V tiles from the pages into a ring of shared-memory stages, and two
// consumers of 64 query rows each that run the products and the softmax on every tile the
// producer lands. Handoffs are mbarriers, one "full" and one "empty" a stage, so no consumer
// waits on a copy it issued or on the other consumer (FlashAttention-3's structure, here
// with cp.async gathers from the pages rather than TMA). The two consumers' products and
// softmaxes interleave on the SM. Same params, row packing, key splits and outputs as the
// mma.sync kernel (prefill_tc_kernel.cuh); head_dim 64 and 128. Plain CUDA C++ (no Abseil).
//
// Forms measured and not kept (docs/BENCHMARKS.md): FlashAttention-3's intra-warpgroup
// overlap (the next tile's Q K^T and this tile's P V issued before the softmax; 10% slower
// here), 128-key tiles (registers moved to the consumers with setmaxnreg; ptxas still
// allocates 168 a thread and spills; 12% slower), a first form without warp
// specialisation in core-matrix (unswizzled) layout (110-130 TFLOP/s against this one's 276),
// the producer bringing tiles in as tensor-map boxes (one lane, every stage in flight; the
// same within 2% in relay, 7% slower on long prefills at 16-token pages) and the consumers
// taking turns issuing their products (FlashAttention-3's pingpong; within 1%).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention/block_timeline.h"
#include "kernels/attention/mbarrier.cuh"
#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/prefill_tc_kernel.cuh"
#include "kernels/attention/wgmma.cuh"
#include "kernels/cuda_device.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/dispatch.h"

namespace strata::kernels::internal {
namespace prefill_wgmma_ws {

// The developer build's phase stamps (block_timeline.h); in other builds Stamp is empty.
#ifdef STRATA_KERNEL_TIMELINE
__device__ unsigned long long g_stamps[kTimelineMaxBlocks][kWgmmaPhases];
__device__ unsigned long long g_armed_ns;
__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void Stamp(WgmmaPhase phase) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (block < kTimelineMaxBlocks) g_stamps[block][phase] = GlobalTimerNs();
}
__global__ void ArmKernel() { g_armed_ns = GlobalTimerNs(); }
#else
__device__ __forceinline__ void Stamp(WgmmaPhase) {}
#endif

constexpr int kConsumers = 2;  // consumer warpgroups, 64 query rows each
constexpr int kTileRows = 64 * kConsumers;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kKeyTile = 64;          // keys a K/V tile
constexpr int kStages = 4;            // K/V tiles in flight or in use
constexpr int kMaxSmem = 227 * 1024;  // a block's shared memory on sm_90

// Bytes of shared memory: 1 KB to align the base, the Q tile, the K and V stages, the barriers.
constexpr int SmemBytes(int head_dim) {
  return 1024 + (kTileRows + 2 * kStages * kKeyTile) * head_dim * 2 + 2 * kStages * 8;
}

// Where element (row, col) of a tile of `rows` rows sits, in bytes from the tile's start: the
// 128-byte swizzle layout (wgmma.cuh), one region of rows x 128 bytes for each 64 columns.
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int col, int rows) {
  return static_cast<uint32_t>((col / 64) * rows * 128 + row * 128 + ((((col % 64) / 8) ^ (row & 7)) << 4) +
                               (col % 8) * 2);
}

// The online softmax of one 64 x (2 kSFloats) score tile in the wgmma accumulator layout
// (wgmma.cuh): s becomes exp2((s - max) * scale log2 e) of each row's running maximum, the
// row sums take the tile, and alpha[h] is what the row's earlier output must be scaled by.
// In log2 units, as PrefillTcBlock's.
template <int kSFloats>
__device__ __forceinline__ void SoftmaxTile(float (&s)[kSFloats], float (&row_max)[2], float (&row_sum)[2],
                                            float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = row_max[h];
#pragma unroll
    for (int j = 0; j < kSFloats / 4; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_use = mx == -INFINITY ? 0.0f : mx;
    alpha[h] = FastExp2((row_max[h] - m_use) * scale_log2);
    row_max[h] = mx;
    const float bias = m_use * scale_log2;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kSFloats / 4; ++j) {
      s[4 * j + 2 * h] = FastExp2(fmaf(s[4 * j + 2 * h], scale_log2, -bias));
      s[4 * j + 2 * h + 1] = FastExp2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -bias));
      sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
    }
    row_sum[h] = row_sum[h] * alpha[h] + sum;
  }
}

// O's rows scaled by alpha, skipped by a warp none of whose rows' maxima moved.
template <int kOFloats>
__device__ __forceinline__ void Rescale(float (&o)[kOFloats], const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) return;
#pragma unroll
  for (int d = 0; d < kOFloats / 4; ++d) {
    o[4 * d] *= alpha[0];
    o[4 * d + 1] *= alpha[0];
    o[4 * d + 2] *= alpha[1];
    o[4 * d + 3] *= alpha[1];
  }
}

// One block per (128-row query tile, KV head and subgroup, sequence), as PrefillTcBlock's
// grid. Shared memory, from a 1024-byte aligned base: Q (consumer c's 64 rows at c * 64 *
// head_dim), kStages K and V tiles, all in the 128-byte swizzle layout (SwizzledOffset), so
// that the producer's copies read whole rows (16 neighbouring threads a key's 256 bytes) and
// write whole 128-byte lines, and the products read without bank conflicts; then the barriers.
//
// Stage s holds tiles s, s + kStages, ...: full[s] completes a phase when the producer's
// 128 threads have each landed their copies of the stage's tile (cp.async waited, then a
// proxy fence: the products read through the async proxy), empty[s] when the consumers'
// eight warps are done reading it (their products waited). Tile i is in phase i / kStages
// of its stage's barriers.
//
// At most kRegisters a thread: as many as an SM has for 384 threads.
constexpr int kRegisters = 65536 / kThreads / 8 * 8;
template <int kHeadDim, int kGroup>
__global__ void __maxnreg__(kRegisters) PagedPrefillWgmmaWsKernel(const PrefillTcParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  if (threadIdx.x == 0) Stamp(kEntered);
  AllowDependentLaunch();
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kTileBytes = kKeyTile * kHeadDim * 2;
  constexpr int kDimSteps = kHeadDim / 16;
  constexpr int kKeySteps = kKeyTile / 16;
  constexpr int kSFloats = kKeyTile / 2, kOFloats = kHeadDim / 2;
  constexpr int kProducers = 128;
  constexpr int kCopies = kKeyTile * kChunks / kProducers;
  static_assert(kKeyTile * kChunks % kProducers == 0, "a K/V tile's chunks divide among the producer's threads");
  unsigned char* smem = smem_raw + ((1024 - (mbarrier::SmemAddress(smem_raw) & 1023)) & 1023);
  unsigned char* s_q = smem;
  unsigned char* s_k = s_q + kTileRows * kHeadDim * 2;  // [kStages][kTileBytes]
  unsigned char* s_v = s_k + kStages * kTileBytes;      // [kStages][kTileBytes]
  uint64_t* full = reinterpret_cast<uint64_t*>(s_v + kStages * kTileBytes);
  uint64_t* empty = full + kStages;

  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = tid / 32 % 4, lane = tid & 31;
  const int bx = static_cast<int>(blockIdx.x), by = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  prefill_tc::BlockTile at;
  if (!prefill_tc::LocateBlock<kGroup, kTileRows, kKeyTile>(p, bx, by, b, static_cast<int>(gridDim.x), at)) return;
  const int kt_begin = at.kt_begin, tiles = at.key_tiles - at.kt_begin;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier::Init(&full[s], kProducers);
      mbarrier::Init(&empty[s], 4 * kConsumers);
    }
  }
  __syncthreads();
  if (tid == 0) Stamp(kLocated);

  if (wg == 0) {
    // The producer. Copy j of a tile takes key copy_key(j) (the same keys every tile) and
    // chunk copy_chunk; the element offsets of the next tile's rows are looked up while this
    // one's copies fly.
    const int len = at.len, first_page = at.first_page;
    const int64_t row_elems = int64_t{p.kv_heads} * kHeadDim;
    const int copy_chunk = tid % kChunks;
    auto copy_key = [&](int j) { return (tid + j * kProducers) / kChunks; };
    int32_t slot_at[kCopies];  // the pool row (page * page_size + token in page) of each copy's key
    auto fetch_rows = [&](int kt) {
#pragma unroll
      for (int j = 0; j < kCopies; ++j) {
        const int t = kt * kKeyTile + copy_key(j), at_token = t < len ? t : 0;
        const int page = p.indices[first_page + at_token / p.page_size];
        slot_at[j] = page * p.page_size + at_token % p.page_size;
      }
    };
    if (tiles > 0) fetch_rows(kt_begin);
    // Up to kStages - 1 tiles' copies in flight; a tile's full barrier gets this thread's
    // arrival once its copies have landed.
    constexpr int kInFlight = kStages - 1;
    int landed = 0;
    auto land = [&] {
      wgmma::FenceSharedForAsync();
      if (tid == 0 && landed == 0) Stamp(kFirstLanded);  // before its arrival: no consumer is past it yet
      mbarrier::Arrive(&full[landed % kStages]);
      ++landed;
    };
    for (int i = 0; i < tiles; ++i) {
      const int stage = i % kStages;
      if (i >= kStages) mbarrier::Wait(&empty[stage], (i / kStages - 1) & 1);
      const int kt = kt_begin + i;
      unsigned char* dk = s_k + stage * kTileBytes;
      unsigned char* dv = s_v + stage * kTileBytes;
#pragma unroll
      for (int j = 0; j < kCopies; ++j) {
        const uint32_t to = SwizzledOffset(copy_key(j), copy_chunk * 8, kKeyTile);
        const bool valid = kt * kKeyTile + copy_key(j) < len;
        const int64_t from = int64_t{slot_at[j]} * row_elems + at.kvh * kHeadDim + copy_chunk * 8;
        CpAsync16(dk + to, p.k_pages + from, valid);
        CpAsync16(dv + to, p.v_pages + from, valid);
      }
      CpAsyncCommit();
      if (i + 1 < tiles) fetch_rows(kt + 1);
      if (i - landed >= kInFlight - 1) {
        CpAsyncWait<kInFlight - 1>();
        land();
      }
    }
    CpAsyncWait<0>();
    while (landed < tiles) land();
    if (tid == 0) Stamp(kProducerDone);
    return;
  }

  // A consumer: its 64 rows of the tile.
  const int c = wg - 1;
  const int row0 = at.m0 + c * 64;  // the consumer's first packed row
  unsigned char* q_tile = s_q + c * 64 * kHeadDim * 2;
  // Q: every load issued before the first store (16 float4 a thread at head_dim 128).
  constexpr int kQLoads = 64 * kHeadDim / 4 / 128;
  float4 qv[kQLoads];
#pragma unroll
  for (int j = 0; j < kQLoads; ++j) {
    const int i = tid - 128 * wg + j * 128, row = i / (kHeadDim / 4), col = i % (kHeadDim / 4) * 4;
    const int m = row0 + row, token = m / kGroup, g = m % kGroup;
    qv[j] = token < at.new_tokens ? *reinterpret_cast<const float4*>(
                                        p.q + ((int64_t{at.q_begin} + token) * p.num_heads + at.hb + g) * kHeadDim + col)
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int j = 0; j < kQLoads; ++j) {
    const int i = tid - 128 * wg + j * 128, row = i / (kHeadDim / 4), col = i % (kHeadDim / 4) * 4;
    *reinterpret_cast<uint2*>(q_tile + SwizzledOffset(row, col, 64)) =
        make_uint2(prefill_tc::PackBf16(qv[j].x, qv[j].y), prefill_tc::PackBf16(qv[j].z, qv[j].w));
  }
  wgmma::FenceSharedForAsync();
  mbarrier::NamedSync(1 + c, 128);
  if (tid == 128) Stamp(kQReady);

  // This thread's rows: lane / 4 and lane / 4 + 8 of its warp's 16.
  int query_pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    query_pos[h] = at.first_pos + at.pos_step * ((row0 + warp * 16 + lane / 4 + h * 8) / kGroup);
  }
  const float scale_log2 = p.scale * prefill_tc::kLog2e;
  float o[kOFloats];
#pragma unroll
  for (int i = 0; i < kOFloats; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, alpha[2];
  float s[kSFloats];
  uint32_t pa[kKeySteps][4];

  // The products' issue: the caller waits for the tile's stage (wait_full), pins the
  // accumulators and fences first, and commits after.
  auto wait_full = [&](int i) { mbarrier::Wait(&full[i % kStages], (i / kStages) & 1); };
  // K-major Q and K: k-step ks is 32 bytes into the rows of region ks / 4. MN-major V: key
  // step kk starts at row 16 kk; its 64-column regions lie kKeyTile rows apart.
  auto issue_s = [&](int i) {  // S = Q K^T of tile i
    const unsigned char* k_tile = s_k + i % kStages * kTileBytes;
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      const int at_k = ks / 4 * 64 * 128 + ks % 4 * 32;
      const uint64_t q_desc = wgmma::DescSw128(q_tile + at_k, 16, 1024);
      const uint64_t k_desc = wgmma::DescSw128(k_tile + ks / 4 * kKeyTile * 128 + ks % 4 * 32, 16, 1024);
      wgmma::WgmmaSS64(s, q_desc, k_desc, ks > 0);
    }
  };
  auto issue_pv = [&](int i) {  // O += P V of tile i
    const unsigned char* v_tile = s_v + i % kStages * kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      const uint64_t v_desc = wgmma::DescSw128(v_tile + kk * 16 * 128, kKeyTile * 128, 1024);
      if constexpr (kHeadDim == 128) {
        wgmma::WgmmaRS128(o, pa[kk], v_desc, 1);
      } else {
        wgmma::WgmmaRS64(o, pa[kk], v_desc, 1);
      }
    }
  };
  auto mask = [&](int i) {  // keys past a row's position (the diagonal, or the prefix's end)
    const int kt = kt_begin + i;
    if (kt * kKeyTile + kKeyTile - 1 <= at.min_pos) return;
#pragma unroll
    for (int e = 0; e < kSFloats; ++e) {
      const int key = kt * kKeyTile + e / 4 * 8 + (lane & 3) * 2 + (e & 1);
      if (key > query_pos[e % 4 / 2]) s[e] = -INFINITY;
    }
  };
  auto pack_p = [&] {  // two adjacent 8-key blocks of S are the A fragment of a 16-key step
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = prefill_tc::PackBf16(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    }
  };
  auto release = [&](int i) {  // this warp is done reading tile i's stage
    if (lane == 0) mbarrier::Arrive(&empty[i % kStages]);
  };

  for (int i = 0; i < tiles; ++i) {
    wait_full(i);
    if (tid == 128 && i == 0) Stamp(kFirstTaken);
    wgmma::PinOperands(s);
    wgmma::Fence();
    issue_s(i);
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::PinOperands(s);
    mask(i);
    SoftmaxTile(s, row_max, row_sum, alpha, scale_log2);
    Rescale(o, alpha);
    pack_p();
    wgmma::PinOperands(o);
    wgmma::Fence();
    issue_pv(i);
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::PinOperands(o);
    release(i);
  }
  if (tid == 128) Stamp(kLoopDone);

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    prefill_tc::StoreRow<kHeadDim, kGroup>(p, at, row0 + warp * 16 + lane / 4 + h * 8, lane, row_max[h], row_sum[h],
                                           [&](int d) { return make_float2(o[4 * d + 2 * h], o[4 * d + 2 * h + 1]); });
  }
  if (tid == 128) Stamp(kStored);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <int kHeadDim, int kGroup>
cudaError_t Launch(const PrefillTcParams& p, cudaStream_t stream) {
  constexpr int kSmem = SmemBytes(kHeadDim);
  static_assert(kSmem <= kMaxSmem);
  auto* kernel = PagedPrefillWgmmaWsKernel<kHeadDim, kGroup>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      e != cudaSuccess) {
    return e;
  }
  if (p.resident_blocks_out != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(p.resident_blocks_out, kernel, kThreads, kSmem);
  }
  const int64_t tiles = (int64_t{p.max_new_tokens} * kGroup + kTileRows - 1) / kTileRows;
  const int subgroups = p.num_heads / p.kv_heads / kGroup;
  kernel<<<dim3(static_cast<unsigned>(tiles * p.key_splits), p.kv_heads * subgroups, p.batch), kThreads, kSmem,
           stream>>>(p);
  return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t LaunchHeadDim(const PrefillTcParams& p, cudaStream_t stream) {
  STRATA_DISPATCH_GQA_GROUP_SIZE(GqaSubgroupSize(p.num_heads / p.kv_heads), kGroup,
                                 { return Launch<kHeadDim, kGroup>(p, stream); })
  return cudaErrorInvalidValue;
}

}  // namespace prefill_wgmma_ws

int WgmmaSmemBytes(int head_dim) { return prefill_wgmma_ws::SmemBytes(head_dim); }

#ifdef STRATA_KERNEL_TIMELINE
bool WgmmaTimelineStamps() { return true; }

cudaError_t ArmWgmmaTimeline(cudaStream_t stream) {
  void* stamps = nullptr;
  if (cudaError_t e = cudaGetSymbolAddress(&stamps, prefill_wgmma_ws::g_stamps); e != cudaSuccess) return e;
  if (cudaError_t e = cudaMemsetAsync(stamps, 0, sizeof(prefill_wgmma_ws::g_stamps), stream); e != cudaSuccess) {
    return e;
  }
  prefill_wgmma_ws::ArmKernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t ReadWgmmaTimeline(BlockTimeline* out) {
  static_assert(sizeof(prefill_wgmma_ws::g_stamps) == sizeof(std::array<uint64_t, kWgmmaPhases>) * kTimelineMaxBlocks);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return e;
  out->blocks.resize(kTimelineMaxBlocks);
  if (cudaError_t e = cudaMemcpyFromSymbol(out->blocks.data(), prefill_wgmma_ws::g_stamps,
                                           sizeof(prefill_wgmma_ws::g_stamps));
      e != cudaSuccess) {
    return e;
  }
  auto& b = out->blocks;  // the blocks that did not run (or past the array's end) left out
  b.erase(std::remove_if(b.begin(), b.end(), [](const auto& block) { return block[kEntered] == 0; }), b.end());
  return cudaMemcpyFromSymbol(&out->armed_ns, prefill_wgmma_ws::g_armed_ns, sizeof(out->armed_ns));
}
#else
bool WgmmaTimelineStamps() { return false; }
cudaError_t ArmWgmmaTimeline(cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t ReadWgmmaTimeline(BlockTimeline*) { return cudaErrorNotSupported; }
#endif

cudaError_t PagedPrefillAttentionWgmmaWsAsync(const PrefillTcParams& p, cudaStream_t stream) {
  if (p.head_dim == 64) return prefill_wgmma_ws::LaunchHeadDim<64>(p, stream);
  if (p.head_dim == 128) return prefill_wgmma_ws::LaunchHeadDim<128>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace strata::kernels::internal
