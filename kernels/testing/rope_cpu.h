// CPU twins, for tests only, of the KV placement kernels in kernels/rope/rope.h: the
// specification each device kernel is checked against. Preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_TESTING_ROPE_CPU_H_
#define STRATA_KERNELS_TESTING_ROPE_CPU_H_

#include <cstdint>

#include "kernels/rope/kv_place_params.h"

namespace strata::kernels {

// Places n tokens' KV into a paged pool in one pass: token i's K row k_raw[i]
// ([kv_heads][head_dim] fp32, before RoPE, as the session cache stores it) is rotated for
// positions[i] exactly as ApplyRope with inv_freq does, then stored bf16 with its V row
// v[i] at pool slot slots[i] (page * page_size + offset; rows of kv_heads * head_dim).
void PlaceKvPaged(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots, int n,
                  int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages, uint16_t* v_pages);

// QkvRopePlace, PlaceStoredKv, GatherStoredKv: see kernels/rope/kv_place_params.h.
void QkvRopePlace(const QkvPlaceParams& p);
void PlaceStoredKv(const uint16_t* stored, const StoredKvParams& p);
// The reverse (no rotation): copies k_raw and v rows of slots[i] into `stored`.
void GatherStoredKv(const StoredKvParams& p, uint16_t* stored);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_TESTING_ROPE_CPU_H_
