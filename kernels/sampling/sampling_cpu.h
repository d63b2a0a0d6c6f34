// CPU token sampling: the specification of sampling/sampling.h's device sampler and argmax,
// and what the CPU engine runs. Preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_SAMPLING_SAMPLING_CPU_H_
#define STRATA_KERNELS_SAMPLING_SAMPLING_CPU_H_

#include <cstdint>

namespace strata::kernels {

// Picks the next token from logits[vocab] (finite, or -inf for excluded tokens; at least one
// finite). temperature <= 0: the argmax, lowest index on ties; u is ignored. Otherwise, in
// double precision, p = softmax(logits / temperature). With 0 < top_p < 1 the kept set is the
// smallest run of most probable tokens (ties to the lower index) whose mass >= top_p, in
// that order; otherwise every token is kept, in index order. The kept probabilities are
// renormalised and the first kept token whose cumulative probability exceeds u is returned
// (u in [0, 1); the last kept token if rounding leaves none).
int32_t SampleToken(const float* logits, int vocab, float temperature, float top_p, double u);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_SAMPLING_SAMPLING_CPU_H_
