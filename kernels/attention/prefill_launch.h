// Raw launch of the tensor-core prefill attention kernel in prefill.cu, for prefill.cc (and the
// test and benchmark that compare tile shapes). Kept free of
// Abseil so nvcc never parses it; arguments are validated by the caller.
#ifndef STRATA_KERNELS_ATTENTION_PREFILL_LAUNCH_H_
#define STRATA_KERNELS_ATTENTION_PREFILL_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::internal {

// Device pointers and shapes of one prefill attention call (see prefill.h).
struct PrefillTcParams {
  const float* q;             // [rows][num_heads][head_dim]
  const uint16_t* k_pages;    // bf16 pool
  const uint16_t* v_pages;
  const int32_t* indptr;      // [batch + 1]
  const int32_t* indices;
  const int32_t* last_page_len;
  const int32_t* qo_indptr;   // [batch + 1]; null: decode, row b is sequence b's last token
  int page_size, kv_heads, head_dim, num_heads, batch, max_new_tokens;
  float scale;
  float* out;                 // [rows][num_heads][head_dim]
  float* lse;                 // [rows][num_heads] or null
  bool all_keys = false;      // every query row sees all of its sequence's keys (not causal)
  // Split along the keys: key_splits blocks per query tile take consecutive ranges of the
  // key tiles. With ws_o, each block writes its part's normalised output and lse (-inf
  // when empty) to ws_o [rows][key_splits][num_heads][head_dim] and ws_lse
  // [rows][key_splits][num_heads] (not out / lse) for MergeStatesAsync; without, key_splits
  // must be 1.
  int key_splits = 1;
  float* ws_o = nullptr;
  float* ws_lse = nullptr;
  // With ws_row_parts > 0, part s of row r goes to row r * ws_row_parts + ws_first_part + s
  // of ws_o / ws_lse instead (relay attention's fused launch: the context part's parts
  // beside the system part's).
  int ws_row_parts = 0, ws_first_part = 0;
  // The two-warp decode (PagedDecodeTcKeyWarpsAsync) with one part: when set, the rows go
  // here as bf16 (ToBf16's rounding of what out would hold), not to out.
  uint16_t* out_bf16 = nullptr;
  // When set, nothing is launched: the chosen form's resident blocks per SM (the occupancy
  // calculator's) are written here.
  int* resident_blocks_out = nullptr;
  // Launched as a programmatic dependent of the stream's previous kernel
  // (dependent_launch.cuh): the mma.sync forms (the decode's among them) only.
  bool dependent = false;
};

// The kernel's query tile: rows per block and warps (each warp takes 16 or 32 rows), with
// 64-key K/V tiles except k128Rows4Warps at head_dim 128 (32 keys; the 64-key form spills
// registers and is kept for the benchmark's comparison). k16Rows1Warp (one warp, three stages of 32-key
// tiles; head_dim up to 128, else the 64-row form) is the decode form: one query row per
// sequence packs only the group's heads. kAuto chooses from the problem size and the SM
// count.
enum class PrefillTcTiles { kAuto, k64Rows4Warps, k128Rows8Warps, k128Rows4Warps, k128Rows4Warps64Keys, k16Rows1Warp };

cudaError_t PagedPrefillAttentionTcAsync(const PrefillTcParams& p, PrefillTcTiles tiles, cudaStream_t stream);

// The Hopper form (prefill_wgmma_ws.cu, device code for sm_90a only), warp-specialised: a
// producer warpgroup gathers 64-key K/V tiles into four shared-memory stages for two
// consumer warpgroups of 64 rows (128-row tiles, one block an SM), handing them over on
// mbarriers; the same outputs as the forms above within bf16 rounding. head_dim 64 or 128,
// on a device of compute capability 9.0 (PrefillWgmmaSupported); cudaErrorInvalidValue for
// another head_dim.
bool PrefillWgmmaSupported(int head_dim);
cudaError_t PagedPrefillAttentionWgmmaWsAsync(const PrefillTcParams& p, cudaStream_t stream);

// The decode (qo_indptr null, head_dim up to 128) in blocks of key_warps (2 or 4) warps that
// split each part's key tiles between them and merge in shared memory (decode_tc.cu): the same
// outputs as the k16Rows1Warp form, within bf16 rounding; key_splits, ws_o / ws_lse and
// resident_blocks_out as above.
cudaError_t PagedDecodeTcKeyWarpsAsync(const PrefillTcParams& p, int key_warps, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_PREFILL_LAUNCH_H_
