// kernels/rope: rotary position embedding and KV placement on the device. ApplyRope and
// PlaceKvPaged are fp32 twins of the CPU specification (rope_cpu.h: ApplyRope,
// RopeInvFreq; testing/rope_cpu.h: PlaceKvPaged); QkvRopePlace, PlaceStoredKv and
// GatherStoredKv write and read the CUDA backend's three-plane bf16 pool
// (kv_place_params.h describes it; their CPU twins are in kernels/testing/rope_cpu.h).
//
// Conventions of every Launch* here: all pointers are device pointers the caller owns and
// keeps valid until the stream reaches the work; the call only enqueues on `stream` (never
// creates or synchronises one) and is thread-safe. Errors: InvalidArgument (nothing
// launched) for the bad shapes named per function; InternalError, naming the failed call
// and the CUDA error, when a launch fails (an error from earlier asynchronous work can
// surface here too); Unimplemented when strata was built without CUDA.
//
// Numerics: the rotation within fp32 rounding of the CPU twin, so a stored bf16 value may
// differ from the twin's by one unit where the fp32 result sits on a rounding boundary.
// QkvRopePlace and PlaceStoredKv share one device function for K, so the rotated K they
// write for the same raw K and position is the same bits (the session cache's cache-on ==
// cache-off property).
#ifndef STRATA_KERNELS_ROPE_ROPE_H_
#define STRATA_KERNELS_ROPE_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/rope/kv_place_params.h"
#include "kernels/stream.h"

namespace strata::kernels {

// ApplyRope (rope_cpu.h), in place on x [rows][heads][head_dim]: positions [rows] and
// inv_freq [head_dim/2] (RopeInvFreq) are device arrays. InvalidArgument for a negative
// size or an odd head_dim.
struct ApplyRopeParams {
  float* x;
  const int32_t* positions;
  int rows, heads, head_dim;
  const float* inv_freq;
};
absl::Status LaunchApplyRope(const ApplyRopeParams& p, cudaStream_t stream);

// PlaceKvPaged (testing/rope_cpu.h) on the device: rotates the pre-RoPE K rows
// ([n][kv_heads][head_dim] fp32) for positions[i] and scatters them, with V, into the bf16
// pool at slots[i] in one pass. positions, slots and inv_freq are device arrays.
// InvalidArgument for an odd head_dim or negative sizes.
struct PlaceKvPagedParams {
  const float* k_raw;
  const float* v;
  const int32_t* positions;
  const int64_t* slots;
  int n, kv_heads, head_dim;
  const float* inv_freq;
  uint16_t* k_pages;
  uint16_t* v_pages;
};
absl::Status LaunchPlaceKvPaged(const PlaceKvPagedParams& p, cudaStream_t stream);

// QkvRopePlace (kv_place_params.h): rotates Q into q_out and places K (raw and rotated)
// and V at the rows' slots. InvalidArgument for negative sizes, a head_dim that is not even
// and in 2..256, or more than 65535 heads.
absl::Status LaunchQkvRopePlace(const QkvPlaceParams& p, cudaStream_t stream);

// PlaceStoredKv / GatherStoredKv (kv_place_params.h): a stored chunk payload `stored` (a
// device buffer of [layers][2][chunk_tokens][kv_dim] bf16) into the pool's planes, rotating
// K, or the raw K and V rows of the pool back into it. InvalidArgument for negative sizes,
// a head_dim that is not even and in 2..256, n > chunk_tokens or more than 65535 layers.
// GatherStoredKv runs one block per row, or at most max_blocks blocks (> 0) each taking
// rows in turn: writing host memory through its device mapping, a row's stores wait on
// the bus, and a few blocks keep it busy while leaving the SMs to other streams.
absl::Status LaunchPlaceStoredKv(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream);
absl::Status LaunchGatherStoredKv(const StoredKvParams& p, uint16_t* stored, cudaStream_t stream,
                                  int max_blocks = 0);
// GatherStoredKvChunks (kv_place_params.h): the gathers of p.chunks chunks, whose records
// lie in device memory, in one launch of at most max_blocks blocks (> 0; 0: one a row):
// a session's write-back is one enqueue, not one per chunk. InvalidArgument for negative
// sizes, a head_dim that is not even and in 2..256, or a null record array with chunks.
// A record's count past chunk_tokens writes the chunk's chunk_tokens rows.
absl::Status LaunchGatherStoredKvChunks(const StoredChunksParams& p, cudaStream_t stream, int max_blocks = 0);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ROPE_ROPE_H_
