// CPU twins, for tests only, of the paged attention kernels (kernels/attention/decode.h,
// prefill.h) and of the (o, lse) merge their split-K uses (kernels/attention/merge.cu): the
// specifications, built on Attention (kernels/attention/attention_cpu.h). Determinism
// contract and preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_TESTING_ATTENTION_CPU_H_
#define STRATA_KERNELS_TESTING_ATTENTION_CPU_H_

#include <cstdint>

#include "kernels/attention/paged_kv.h"

namespace strata::kernels {

// Merges two partial attentions over disjoint key sets of the same queries (FlashInfer's
// merge_state). o1, o2 and o are [rows][heads][head_dim]; lse1, lse2 and lse are
// [rows][heads]. With m = max(lse1, lse2), a1 = exp(lse1 - m), a2 = exp(lse2 - m):
//   o = (o1*a1 + o2*a2) / (a1 + a2);   lse = m + log(a1 + a2)
// i.e. o = a*o1 + (1-a)*o2 with a = 1/(1 + exp(lse2 - lse1)). A part with lse = -inf is an
// empty part; if both are empty, o = 0 and lse = -inf. o and lse may alias o1/lse1 or
// o2/lse2 (same offsets).
void MergeAttentionStates(const float* o1, const float* lse1, const float* o2, const float* lse2,
                          float* o, float* lse, int rows, int heads, int head_dim);

// Tokens of sequence b in a PagedKv.
int64_t PagedSequenceLength(const PagedKv& kv, int b);

// Decode attention over a paged pool: one query per sequence, q [batch][num_heads][head_dim]
// (fp32, rotated), against every token of its sequence; out [batch][num_heads][head_dim],
// lse [batch][num_heads] (may be null). The specification: the sequence's K and V widened
// to fp32 and gathered into contiguous rows, then Attention() with the query at the last
// position.
void PagedDecodeAttention(const float* q, const PagedKv& kv, int batch, int num_heads, float scale, float* out,
                          float* lse);

// Prefill attention over a paged pool: the new tokens of sequence b are query rows
// [qo_indptr[b], qo_indptr[b+1]) of q ([rows][num_heads][head_dim]), the last tokens of the
// sequence (their KV already in the pool); each sees the sequence's tokens up to its own
// position (causal). out and lse as PagedDecodeAttention. Specification: gather, then
// Attention() with first_query_pos = length - new tokens.
void PagedPrefillAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch, int num_heads,
                           float scale, float* out, float* lse);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_TESTING_ATTENTION_CPU_H_
