// The parameter structs of the KV placement kernels that write the CUDA backend's paged
// pool (rope.h's LaunchQkvRopePlace, LaunchPlaceStoredKv, LaunchGatherStoredKv,
// LaunchGatherStoredKvChunks). Plain structs without Abseil, shared by the launches, their
// raw nvcc-side launches and the CPU twins in kernels/testing/rope_cpu.h.
//
// Paged KV pool with three planes (the CUDA backend's): for one layer, k_rot, k_raw and v
// each hold slot s's row of kv_dim = kv_heads * head_dim values at s * kv_dim. k_rot is K
// rotated to its position (what attention reads), k_raw is K before RoPE (what the
// session cache stores), v is V. The rotated K is always computed from the bf16-rounded
// raw K, so K placed from the session cache and K computed by a forward pass are the same
// bits.
#ifndef STRATA_KERNELS_ROPE_KV_PLACE_PARAMS_H_
#define STRATA_KERNELS_ROPE_KV_PLACE_PARAMS_H_

#include <cstdint>

namespace strata::kernels {

// After the fused QKV projection: qkv is [rows][q_dim + 2 kv_dim] fp32 (q, then k, then v
// columns), bias null or [q_dim + 2 kv_dim]. For each row r at positions[r]:
//   q_out[r] = ApplyRope(q + bias_q)                       (fp32, [rows][q_dim])
//   k_raw[slots[r]] = bf16(k + bias_k)
//   k_rot[slots[r]] = bf16(ApplyRope(widen(k_raw[slots[r]])))
//   v[slots[r]] = bf16(v + bias_v)
// With q_norm and k_norm (Qwen3), each q and k head is RMS-normed first (x / rms(x) * w,
// eps norm_eps, as LaunchHeadRmsNorm), in the same kernel: no launch of its own.
// Pool planes as above (one layer's).
struct QkvPlaceParams {
  const float* qkv;
  const float* bias;  // may be null
  const int32_t* positions;
  const int64_t* slots;
  int rows, num_heads, kv_heads, head_dim;
  const float* inv_freq;  // [head_dim / 2]
  float* q_out;
  uint16_t* k_rot;
  uint16_t* k_raw;
  uint16_t* v;
  const float* q_norm = nullptr;  // [head_dim] each, or both null
  const float* k_norm = nullptr;
  float norm_eps = 0.0f;
};

// Places stored KV of n tokens (all layers) into the pool. `stored` is a chunk payload of
// bf16 rows laid [layer][kv (0 = K before RoPE, 1 = V)][chunk_tokens][kv_dim]; token i
// (i < n <= chunk_tokens) goes to slots[i] at positions[i], for every layer, as
// QkvRopePlace writes K and V. Layer l's planes start at plane + l * layer_stride.
//
// With index_stride > 0 (PlaceStoredKv only) the "layers" are the chunks of one layer in a
// read buffer: block l's token i takes positions[l * index_stride + i] and
// slots[l * index_stride + i], a slot < 0 is skipped (a short chunk's tail), and
// layer_stride is 0 (every block lands in the one layer the planes point at).
// stored_block_stride (values; 0: 2 * chunk_tokens * kv_dim, blocks back to back) is how
// far apart `stored`'s blocks lie: a read buffer holding several layers of each chunk.
struct StoredKvParams {
  int n, layers, chunk_tokens, kv_heads, head_dim;
  const int32_t* positions;  // [n]; PlaceStoredKv only
  const int64_t* slots;      // [n]
  const float* inv_freq;     // PlaceStoredKv only
  int64_t layer_stride;      // values between one layer's plane and the next
  uint16_t* k_rot;           // PlaceStoredKv only
  uint16_t* k_raw;
  uint16_t* v;
  int index_stride = 0;
  int64_t stored_block_stride = 0;
};

// Several chunks' gathers in one launch (a session's write-back, LaunchGatherStoredKvChunks):
// chunk c's record, StoredChunkRecordWords(chunk_tokens) int64 words at
// records + c * that, holds {where the chunk payload is written (an address the kernel
// may store to: device memory or mapped host memory), its token count n (0..chunk_tokens),
// the n tokens' slots (then unused words)}. Each chunk's first n rows of every layer are
// written as GatherStoredKv writes them; its other rows are untouched.
struct StoredChunksParams {
  int chunks, layers, chunk_tokens, kv_heads, head_dim;
  const int64_t* records;
  int64_t layer_stride;  // values between one layer's plane and the next
  const uint16_t* k_raw;
  const uint16_t* v;
};

#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t StoredChunkRecordWords(int chunk_tokens) { return 2 + int64_t{chunk_tokens}; }

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ROPE_KV_PLACE_PARAMS_H_
