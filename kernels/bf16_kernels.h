// CPU twins (the specification) of the kernels the CUDA backend runs around its bf16
// matrix products: activations in fp32, matrix operands and the paged KV pool in bf16
// (stored as uint16_t). The device versions are in cuda_model_kernels.h.
//
// Paged KV pool with three planes (the CUDA backend's): for one layer, k_rot, k_raw and v
// each hold slot s's row of kv_dim = kv_heads * head_dim values at s * kv_dim. k_rot is K
// rotated to its position (what attention reads), k_raw is K before RoPE (what the
// session cache stores), v is V. The rotated K is always computed from the bf16-rounded
// raw K, so K placed from the session cache and K computed by a forward pass are the same
// bits.
//
// Preconditions as in cpu_kernels.h (valid pointers and sizes; no error channel).
#ifndef STRATA_KERNELS_BF16_KERNELS_H_
#define STRATA_KERNELS_BF16_KERNELS_H_

#include <cstdint>

namespace strata::kernels {

// out[r] = widen(table[ids[r]]): rows of dim values, bf16 table, fp32 out.
void EmbedBf16(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out);

// y = bf16(RmsNorm(x)) (RmsNorm as cpu_kernels.h). With `add` non-null, first
// x += add (x is then the updated residual stream). x, add: [rows][dim] fp32.
void RmsNormToBf16(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim, float eps);

// gate_up: [rows][2 * ffn] fp32 (gate in columns [0, ffn), up in [ffn, 2 ffn));
// out[r][i] = bf16(silu(gate) * up) as SwiGlu in cpu_kernels.h.
void SwiGluToBf16(const float* gate_up, uint16_t* out, int rows, int ffn);

// out[i] = bf16(x[i]).
void ToBf16(const float* x, uint16_t* out, int64_t n);

// After the fused QKV projection: qkv is [rows][q_dim + 2 kv_dim] fp32 (q, then k, then v
// columns), bias null or [q_dim + 2 kv_dim]. For each row r at positions[r]:
//   q_out[r] = ApplyRope(q + bias_q)                       (fp32, [rows][q_dim])
//   k_raw[slots[r]] = bf16(k + bias_k)
//   k_rot[slots[r]] = bf16(ApplyRope(widen(k_raw[slots[r]])))
//   v[slots[r]] = bf16(v + bias_v)
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
};
void QkvRopePlace(const QkvPlaceParams& p);

// Places stored KV of n tokens (all layers) into the pool. `stored` is a chunk payload of
// bf16 rows laid [layer][kv (0 = K before RoPE, 1 = V)][chunk_tokens][kv_dim]; token i
// (i < n <= chunk_tokens) goes to slots[i] at positions[i], for every layer, as
// QkvRopePlace writes K and V. Layer l's planes start at plane + l * layer_stride.
struct StoredKvParams {
  int n, layers, chunk_tokens, kv_heads, head_dim;
  const int32_t* positions;  // [n]; PlaceStoredKv only
  const int64_t* slots;      // [n]
  const float* inv_freq;     // PlaceStoredKv only
  int64_t layer_stride;      // values between one layer's plane and the next
  uint16_t* k_rot;           // PlaceStoredKv only
  uint16_t* k_raw;
  uint16_t* v;
};
void PlaceStoredKv(const uint16_t* stored, const StoredKvParams& p);
// The reverse (no rotation): copies k_raw and v rows of slots[i] into `stored`.
void GatherStoredKv(const StoredKvParams& p, uint16_t* stored);

// out[j] = in[rows[j]] for j < n: rows of dim bf16 values.
void GatherRowsBf16(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_BF16_KERNELS_H_
