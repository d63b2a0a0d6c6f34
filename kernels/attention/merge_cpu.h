// The (o, lse) merge on the CPU: two partial attentions of the same queries over disjoint
// key sets become the attention over their union. The split-sequence merge of the device
// kernels (merge.cu) and the relay merge (relay_cpu.h) are this operation.
#ifndef STRATA_KERNELS_ATTENTION_MERGE_CPU_H_
#define STRATA_KERNELS_ATTENTION_MERGE_CPU_H_

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

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_MERGE_CPU_H_
