// Device kernels behind rope.h (plain CUDA C++, no Abseil).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/alignment.h"
#include "kernels/cuda_device.cuh"
#include "kernels/rope/rope_launch.h"

namespace strata::kernels::internal {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // one block per token row for the KV placement kernels

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


// The rotation of one (i, i + half) pair, as ApplyRope: the one place both the forward
// pass and the session-cache load rotate K, so both give the same bits.
__device__ __forceinline__ void Rotate(float a, float b, int32_t position, float inv_freq, float* ra, float* rb) {
  const float angle = static_cast<float>(position) * inv_freq;
  const float c = cosf(angle), s = sinf(angle);
  *ra = a * c - b * s;
  *rb = b * c + a * s;
}

// K and V of one token's KV head `h` into the three planes at `slot` (one layer's
// planes). k(j), v(j) give the head's raw fp32 values (bias applied), j < head_dim; the
// caller's block strides over pairs and values.
template <typename KFn, typename VFn>
__device__ void PlaceHead(KFn k, VFn v, int h, int32_t position, int64_t slot, int kv_heads, int head_dim,
                          const float* __restrict__ inv_freq, uint16_t* k_rot, uint16_t* k_raw, uint16_t* v_plane) {
  const int half = head_dim / 2;
  const int64_t base = slot * kv_heads * head_dim + int64_t{h} * head_dim;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const uint16_t raw_a = Narrow(k(i)), raw_b = Narrow(k(i + half));
    k_raw[base + i] = raw_a;
    k_raw[base + i + half] = raw_b;
    float ra, rb;
    Rotate(Widen(raw_a), Widen(raw_b), position, inv_freq[i], &ra, &rb);
    k_rot[base + i] = Narrow(ra);
    k_rot[base + i + half] = Narrow(rb);
  }
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) v_plane[base + j] = Narrow(v(j));
}

// Grid (rows, num_heads + kv_heads): block (r, y) rotates query head y of row r, or, for
// y >= num_heads, places KV head y - num_heads. One block a head keeps small batches
// (decode) spread over the GPU instead of on one multiprocessor a row.
// With q/k norms, the head's (q or k) sum of squares is taken over the block first (at most
// two warps: shuffles, then one shared-memory exchange).
__global__ void QkvRopePlaceKernel(QkvPlaceParams p) {
  const int r = blockIdx.x, y = blockIdx.y;
  const int qd = p.num_heads * p.head_dim, kvd = p.kv_heads * p.head_dim, width = qd + 2 * kvd, half = p.head_dim / 2;
  const float* row = p.qkv + static_cast<int64_t>(r) * width;
  const float* bias = p.bias;
  const int32_t position = p.positions[r];
  auto value = [row, bias](int j) { return bias != nullptr ? row[j] + bias[j] : row[j]; };
  const bool is_q = y < p.num_heads;
  const int h = is_q ? y : y - p.num_heads;
  const int at = is_q ? y * p.head_dim : qd + h * p.head_dim;  // the head's q or k values
  const float* w = is_q ? p.q_norm : p.k_norm;
  float inv = 1.0f;
  if (w != nullptr) {
    float ss = 0.0f;
    for (int j = threadIdx.x; j < p.head_dim; j += blockDim.x) ss += value(at + j) * value(at + j);
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ float warp_ss[2];
    if (threadIdx.x % 32 == 0) warp_ss[threadIdx.x / 32] = ss;
    __syncthreads();
    ss = blockDim.x > 32 ? warp_ss[0] + warp_ss[1] : warp_ss[0];
    inv = 1.0f / sqrtf(ss / static_cast<float>(p.head_dim) + p.norm_eps);
  }
  auto normed = [&](int j) { return w != nullptr ? (value(at + j) * inv) * w[j] : value(at + j); };
  if (is_q) {
    float* q = p.q_out + static_cast<int64_t>(r) * qd + y * p.head_dim;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      Rotate(normed(i), normed(i + half), position, p.inv_freq[i], &q[i], &q[i + half]);
    }
    return;
  }
  const int v_at = qd + kvd + h * p.head_dim;
  PlaceHead(normed, [&](int j) { return value(v_at + j); }, h, position, p.slots[r], p.kv_heads, p.head_dim,
            p.inv_freq, p.k_rot, p.k_raw, p.v);
}

// Grid (n, layers).
__global__ void PlaceStoredKvKernel(const uint16_t* __restrict__ stored, StoredKvParams p) {
  const int i = blockIdx.x, l = blockIdx.y;
  const int kvd = p.kv_heads * p.head_dim;
  const int64_t block = p.stored_block_stride != 0 ? p.stored_block_stride : int64_t{2} * p.chunk_tokens * kvd;
  const uint16_t* ks = stored + l * block + static_cast<int64_t>(i) * kvd;
  const uint16_t* vs = stored + l * block + (static_cast<int64_t>(p.chunk_tokens) + i) * kvd;
  const int64_t plane = l * p.layer_stride;
  const int64_t index = static_cast<int64_t>(l) * p.index_stride + i;
  const int64_t slot = p.slots[index];
  if (slot < 0) return;
  for (int h = 0; h < p.kv_heads; ++h) {
    const uint16_t* kh = ks + h * p.head_dim;
    const uint16_t* vh = vs + h * p.head_dim;
    PlaceHead([kh](int j) { return Widen(kh[j]); }, [vh](int j) { return Widen(vh[j]); }, h, p.positions[index],
              slot, p.kv_heads, p.head_dim, p.inv_freq, p.k_rot + plane, p.k_raw + plane, p.v + plane);
  }
}

// One row's K before RoPE and V, from the pool's planes at `src` to ks and vs, by the
// block's threads. 16-byte moves where every row is 16-byte aligned (the caller checks):
// an eighth of the instructions.
__device__ __forceinline__ void GatherRow(const uint16_t* __restrict__ k_raw, const uint16_t* __restrict__ v,
                                          int64_t src, int kvd, uint16_t* ks, uint16_t* vs, bool vectorized) {
  if (vectorized) {
    const int n16 = kvd / 8;
    const auto* k16 = reinterpret_cast<const uint4*>(k_raw + src);
    const auto* v16 = reinterpret_cast<const uint4*>(v + src);
    auto* ks16 = reinterpret_cast<uint4*>(ks);
    auto* vs16 = reinterpret_cast<uint4*>(vs);
    for (int j = threadIdx.x; j < n16; j += blockDim.x) {
      ks16[j] = k16[j];
      vs16[j] = v16[j];
    }
    return;
  }
  for (int j = threadIdx.x; j < kvd; j += blockDim.x) {
    ks[j] = k_raw[src + j];
    vs[j] = v[src + j];
  }
}

// Grid: up to n * layers blocks, each taking rows r = blockIdx.x, + gridDim.x, ...: row r
// is token r % n of layer r / n.
__global__ void GatherStoredKvKernel(StoredKvParams p, uint16_t* __restrict__ stored, bool vectorized) {
  const int kvd = p.kv_heads * p.head_dim;
  const int64_t rows = int64_t{p.n} * p.layers;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int i = static_cast<int>(r % p.n), l = static_cast<int>(r / p.n);
    uint16_t* ks = stored + ((static_cast<int64_t>(l) * 2 + 0) * p.chunk_tokens + i) * kvd;
    uint16_t* vs = stored + ((static_cast<int64_t>(l) * 2 + 1) * p.chunk_tokens + i) * kvd;
    GatherRow(p.k_raw, p.v, l * p.layer_stride + p.slots[i] * kvd, kvd, ks, vs, vectorized);
  }
}

// Grid: up to chunks * layers * chunk_tokens blocks taking rows in turn: row r is token
// r % chunk_tokens of layer (r / chunk_tokens) % layers of chunk r / (layers *
// chunk_tokens); tokens past the chunk's count are skipped.
__global__ void GatherStoredKvChunksKernel(StoredChunksParams p, bool vectorized) {
  const int kvd = p.kv_heads * p.head_dim;
  const int64_t per_chunk = int64_t{p.layers} * p.chunk_tokens;
  const int64_t rows = p.chunks * per_chunk, words = StoredChunkRecordWords(p.chunk_tokens);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t* record = p.records + (r / per_chunk) * words;
    const int i = static_cast<int>(r % p.chunk_tokens), l = static_cast<int>((r % per_chunk) / p.chunk_tokens);
    if (i >= record[1]) continue;
    auto* stored = reinterpret_cast<uint16_t*>(record[0]);
    uint16_t* ks = stored + ((static_cast<int64_t>(l) * 2 + 0) * p.chunk_tokens + i) * kvd;
    uint16_t* vs = stored + ((static_cast<int64_t>(l) * 2 + 1) * p.chunk_tokens + i) * kvd;
    GatherRow(p.k_raw, p.v, l * p.layer_stride + record[2 + i] * kvd, kvd, ks, vs,
              vectorized && record[0] % 16 == 0);
  }
}

}  // namespace

cudaError_t ApplyRopeAsync(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                           const float* inv_freq, cudaStream_t stream) {
  const int64_t pairs = static_cast<int64_t>(rows) * heads * (head_dim / 2);
  ApplyRopeKernel<<<GridStrideBlocks(pairs, kThreads, 65535), kThreads, 0, stream>>>(x, positions, pairs, heads,
                                                                                    head_dim, inv_freq);
  return cudaGetLastError();
}

cudaError_t PlaceKvPagedAsync(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots,
                              int n, int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages,
                              uint16_t* v_pages, cudaStream_t stream) {
  const int64_t pairs = int64_t{n} * kv_heads * (head_dim / 2);
  PlaceKvPagedKernel<<<GridStrideBlocks(pairs, kThreads, 65535), kThreads, 0, stream>>>(
      k_raw, v, positions, slots, pairs, kv_heads, head_dim, inv_freq, k_pages, v_pages);
  return cudaGetLastError();
}

cudaError_t QkvRopePlaceAsync(const QkvPlaceParams& p, cudaStream_t stream) {
  QkvRopePlaceKernel<<<dim3(p.rows, p.num_heads + p.kv_heads), p.head_dim / 2 > 32 ? 64 : 32, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t PlaceStoredKvAsync(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream) {
  PlaceStoredKvKernel<<<dim3(p.n, p.layers), kRowThreads, 0, stream>>>(stored, p);
  return cudaGetLastError();
}

namespace {

// Whether GatherRow may move 16 bytes at a time from these planes (each destination's own
// alignment is checked beside it).
bool PlanesVectorizable(int kvd, int64_t layer_stride, const void* k_raw, const void* v) {
  return kvd % 8 == 0 && layer_stride % 8 == 0 && IsAligned(k_raw, 16) && IsAligned(v, 16);
}

}  // namespace

cudaError_t GatherStoredKvAsync(const StoredKvParams& p, uint16_t* stored, int max_blocks, cudaStream_t stream) {
  const bool vectorized =
      PlanesVectorizable(p.kv_heads * p.head_dim, p.layer_stride, p.k_raw, p.v) && IsAligned(stored, 16);
  const int64_t rows = int64_t{p.n} * p.layers;
  const int64_t blocks = max_blocks > 0 ? std::min<int64_t>(rows, max_blocks) : rows;
  GatherStoredKvKernel<<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(p, stored, vectorized);
  return cudaGetLastError();
}

cudaError_t GatherStoredKvChunksAsync(const StoredChunksParams& p, int max_blocks, cudaStream_t stream) {
  // Each record's payload is checked for alignment in the kernel.
  const bool vectorized = PlanesVectorizable(p.kv_heads * p.head_dim, p.layer_stride, p.k_raw, p.v);
  const int64_t rows = int64_t{p.chunks} * p.layers * p.chunk_tokens;
  const int64_t blocks = std::min<int64_t>(max_blocks > 0 ? std::min<int64_t>(rows, max_blocks) : rows, 1 << 30);
  GatherStoredKvChunksKernel<<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(p, vectorized);
  return cudaGetLastError();
}


}  // namespace strata::kernels::internal
