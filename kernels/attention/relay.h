// Relay attention on the device (RelayAttention, ACL'24) for decode rows, the twin of
// relay_cpu.h: sequences that start with one shared prefix (a system prompt whose pages
// they share in the pool) attend to it as a group, so the prefix's KV is read once per
// group and step instead of once per sequence. Conventions: decode.h.
//
//   context part: every row against its own pages (LaunchPagedDecodeAttention over
//                 `context`, with the lse);
//   system part:  each group's rows against the group's prefix pages, all of them (the
//                 tensor-core prefill kernel with all_keys: the group's queries are the rows
//                 of its tiles, so K and V of the prefix are read once per tile), split along
//                 the prefix so that a few groups still fill the device, into parts;
//   merge:        the parts and the context part on log-sum-exp in one pass, in place in
//                 the context part's output (MergeStatesAsync, the split-K decode's merge).
//
// Rows [0, group_rows[groups]) belong to groups (group g: rows [group_rows[g],
// group_rows[g+1])); the rows after them have no shared prefix (their context is all
// their pages). Equals LaunchPagedDecodeAttention over each row's whole sequence (prefix
// pages then own pages) within bf16-operand accuracy (the system part's: see prefill.h).
#ifndef STRATA_KERNELS_ATTENTION_RELAY_H_
#define STRATA_KERNELS_ATTENTION_RELAY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/stream.h"

namespace strata::kernels {

struct RelayDecodeParams {
  const float* q;             // [rows][num_heads][head_dim], fp32, rotated
  PagedKv context;            // per row (indptr over rows): the row's own pages
  PagedKv prefixes;           // per group (indptr over groups): the prefix's pages; pool as context's
  const int32_t* group_rows;  // device [groups + 1], group_rows[0] = 0
  int rows, groups;
  int grouped_rows;    // group_rows[groups], known on the host
  int max_group_rows;  // the largest group (sizes the system part's grid)
  int num_heads;
  float scale;
  int64_t max_context_tokens;  // bounds every row's context (sets the decode split)
  int64_t max_prefix_tokens;   // bounds every group's prefix (sets the system part's split)
  float* workspace;            // RelayDecodeWorkspaceFloats(...) floats
  float* out;                  // [rows][num_heads][head_dim]
};
absl::Status LaunchRelayDecodeAttention(const RelayDecodeParams& p, cudaStream_t stream);

// The shape a relay decode's workspace depends on.
struct RelayShape {
  int rows, groups, grouped_rows, max_group_rows, num_heads, kv_heads, head_dim;
  int64_t max_context_tokens, max_prefix_tokens;
};
// Floats of workspace a relay decode of this shape needs (the decode split's, the context
// part's lse, the system part's parts and their merge). Reads the device's SM count.
int64_t RelayDecodeWorkspaceFloats(const RelayShape& s);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_RELAY_H_
