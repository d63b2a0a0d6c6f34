// CPU twins, for tests only, of the paged attention kernels (kernels/attention/decode.h,
// prefill.h): the specifications, built on Attention (kernels/attention/attention_cpu.h)
// and the (o, lse) merge (kernels/attention/merge_cpu.h). Determinism
// contract and preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_TESTING_ATTENTION_CPU_H_
#define STRATA_KERNELS_TESTING_ATTENTION_CPU_H_

#include <cstdint>

#include "kernels/attention/merge_cpu.h"
#include "kernels/attention/paged_kv.h"

namespace strata::kernels {

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
