// Raw launch of the split-K paged attention kernel in decode.cu (the decode kernel, and the
// CUDA-core prefill that runs it per query row), for split_kv.cc only. Kept free of Abseil so
// nvcc never parses it; arguments are validated by the caller.
#ifndef STRATA_KERNELS_ATTENTION_DECODE_LAUNCH_H_
#define STRATA_KERNELS_ATTENTION_DECODE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::internal {

// Device pointers and shapes of one split-K paged attention call (see decode.h, prefill.h).
struct SplitKvArgs {
  const float* q;  // [rows][num_heads][head_dim]
  const uint16_t* k_pages;
  const uint16_t* v_pages;
  int page_size, kv_heads, head_dim;
  const int32_t* indptr;
  const int32_t* indices;
  const int32_t* last_page_len;
  const int32_t* qo_indptr;  // null for decode (row r is sequence r)
  int batch, rows, num_heads;
  float scale;
  int splits, split_tokens;  // parts per sequence and tokens per part
  float* ws_o;               // [rows][splits][num_heads][head_dim] (splits > 1)
  float* ws_lse;             // [rows][splits][num_heads] (splits > 1)
  float* out;
  float* lse;                // or null
  // Where the parts go: with ws_row_parts > 0, part s of row r is row r * ws_row_parts +
  // ws_first_part + s of ws_o / ws_lse (in units of [num_heads][head_dim] / [num_heads]),
  // and every part goes there, a lone one too (relay attention's fused launch, whose merge
  // takes them with its system part's); 0: [rows][splits] as above.
  int ws_row_parts = 0, ws_first_part = 0;
  // When set, the rows go here as bf16 instead of to out: the merge's, or a lone part's
  // (decode only: the relay's parts and the prefill's rows take out).
  uint16_t* out_bf16 = nullptr;
  // The parts' kernel launched as a programmatic dependent of the stream's previous kernel
  // (dependent_launch.cuh); the merge after it launches ordinarily.
  bool dependent = false;
};

// The parts' attention, then (with more than one part) their merge (merge_launch.h), into
// out_bf16 when given.
cudaError_t PagedDecodeAttentionAsync(const SplitKvArgs& a, cudaStream_t stream);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_DECODE_LAUNCH_H_
