#include "kernels/attention/relay_cpu.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "kernels/attention/attention_cpu.h"
#include "kernels/attention/merge_cpu.h"

namespace strata::kernels {

namespace {

// The fields both parts share: heads, head size, row stride, scale.
AttentionParams Shape(const RelayAttentionParams& p) {
  AttentionParams a{};
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.kv_row_stride = p.kv_row_stride;
  a.scale = p.scale;
  return a;
}

}  // namespace

void RelayAttention(const RelayAttentionParams& p) {
  int64_t rows = 0;
  for (int b = 0; b < p.num_seqs; ++b) rows = std::max(rows, p.seqs[b].first_row + p.seqs[b].num_queries);
  if (rows == 0) return;
  const int64_t row_floats = int64_t{p.num_heads} * p.head_dim;
  // The context part of every sequence, with its log-sum-exp.
  std::vector<float> ctx_lse(static_cast<size_t>(rows * p.num_heads));
  for (int b = 0; b < p.num_seqs; ++b) {
    const RelaySequence& s = p.seqs[b];
    AttentionParams a = Shape(p);
    a.q = p.q + s.first_row * row_floats;
    a.k = s.k;
    a.v = s.v;
    a.out = p.out + s.first_row * row_floats;
    a.lse = ctx_lse.data() + s.first_row * p.num_heads;
    a.num_queries = s.num_queries;
    a.first_query_pos = s.first_query_pos;
    Attention(a);
  }
  if (p.prefix_len <= 0) {
    if (p.lse != nullptr) std::copy(ctx_lse.begin(), ctx_lse.end(), p.lse);
    return;
  }
  // The system part: all rows of the group against the prefix, in one pass; rows no
  // sequence names stay empty parts (lse = -inf) and merge to what the context gave.
  std::vector<float> sys_o(static_cast<size_t>(rows * row_floats));
  std::vector<float> sys_lse(static_cast<size_t>(rows * p.num_heads), -std::numeric_limits<float>::infinity());
  AttentionParams a = Shape(p);
  a.q = p.q;
  a.k = p.prefix_k;
  a.v = p.prefix_v;
  a.out = sys_o.data();
  a.lse = sys_lse.data();
  a.num_queries = static_cast<int>(rows);
  a.shared_keys = p.prefix_len;
  Attention(a);
  float* lse = p.lse != nullptr ? p.lse : ctx_lse.data();
  MergeAttentionStates(sys_o.data(), sys_lse.data(), p.out, ctx_lse.data(), p.out, lse, static_cast<int>(rows),
                       p.num_heads, p.head_dim);
}

}  // namespace strata::kernels
