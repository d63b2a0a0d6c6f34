// Attention on the CPU: causal grouped-query attention over one sequence's contiguous K and
// V, returning (o, lse) so partial attentions compose (testing/attention_cpu.h merges them
// and builds the paged specifications of decode.h and prefill.h on it). What the CPU engine
// runs. Determinism contract and preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_ATTENTION_ATTENTION_CPU_H_
#define STRATA_KERNELS_ATTENTION_ATTENTION_CPU_H_

#include <cstdint>

namespace strata::kernels {

// Causal grouped-query attention of a run of new queries against one sequence's contiguous
// keys and values. Query head h reads KV head h / (num_heads / num_kv_heads); num_heads must
// be a positive multiple of num_kv_heads.
struct AttentionParams {
  const float* q;  // [num_queries][num_heads][head_dim]
  const float* k;  // key row t at k + t * kv_row_stride, laid [num_kv_heads][head_dim]
  const float* v;  // value rows, same layout and stride as k
  float* out;      // [num_queries][num_heads][head_dim]; must not overlap q, k or v
  float* lse;      // null, or [num_queries][num_heads]: natural-log log-sum-exp of the
                   // scaled scores of the keys the query saw
  int num_queries, num_heads, num_kv_heads, head_dim;
  int64_t kv_row_stride;  // floats between consecutive key (and value) rows
  int first_query_pos;    // >= 0; query i sits at position first_query_pos + i and sees
                          // keys [0, first_query_pos + i]
  float scale;            // multiplies each score; usually 1/sqrt(head_dim)
  int shared_keys = 0;    // > 0: not causal: every query sees keys [0, shared_keys) (a
                          // shared prefix all the queries follow; first_query_pos unused)
};

// For each query i and head h, with keys t in [0, first_query_pos + i] (or [0, shared_keys)):
//   s_t = dot(q, k_t) * scale          (dot in the 16-lane pattern above)
//   m = max_t s_t; e_t = exp(s_t - m); sum = sum_t e_t (in increasing t)
//   out[d] = (sum_t e_t * v_t[d], in increasing t) / sum;   lse = m + log(sum)
// The result for a query depends only on its own q, its position and the keys and values it
// sees, so queries may be computed together or in any split (advancing first_query_pos)
// with bit-identical results. Allocates one scratch buffer per call.
void Attention(const AttentionParams& p);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_ATTENTION_CPU_H_
