// Relay attention (RelayAttention, ACL'24) on the CPU: the attention of sequences that all
// start with one shared system prefix, computed in two parts and merged on log-sum-exp:
//   system part:  every query of the group against the prefix's keys (all of them: each
//                 query sits after the prefix), one pass over the prefix for the group;
//   context part: each sequence's queries against its own keys (causal), as Attention();
// then o = a*o_sys + (1-a)*o_ctx with a = 1/(1 + exp(lse_ctx - lse_sys)) (merge_cpu.h).
// Equals Attention() over the prefix's keys followed by the sequence's own, within fp32
// rounding (the sums are split in two). The CPU twin of the device relay path; what the CPU
// engine runs for sequences on a shared prefix.
#ifndef STRATA_KERNELS_ATTENTION_RELAY_CPU_H_
#define STRATA_KERNELS_ATTENTION_RELAY_CPU_H_

#include <cstdint>

namespace strata::kernels {

// One sequence of a relay group: its query rows and its own keys and values.
struct RelaySequence {
  int64_t first_row;     // its queries are rows [first_row, first_row + num_queries) of q
  int num_queries;
  const float* k;        // its own key rows (the tokens after the prefix), stride kv_row_stride
  const float* v;
  int first_query_pos;   // query i sees its own keys [0, first_query_pos + i]
};

struct RelayAttentionParams {
  const float* q;        // [rows][num_heads][head_dim], rotated
  float* out;            // [rows][num_heads][head_dim]
  float* lse;            // null, or [rows][num_heads]
  const float* prefix_k; // the shared prefix's key rows [0, prefix_len), stride kv_row_stride
  const float* prefix_v;
  int prefix_len;        // 0: no system part (plain attention)
  const RelaySequence* seqs;
  int num_seqs;
  int num_heads, num_kv_heads, head_dim;
  int64_t kv_row_stride;
  float scale;
};

void RelayAttention(const RelayAttentionParams& p);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_RELAY_CPU_H_
