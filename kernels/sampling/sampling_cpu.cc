#include "kernels/sampling/sampling_cpu.h"

#include <cstddef>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace strata::kernels {

namespace {

int32_t Argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

}  // namespace

int32_t SampleToken(const float* logits, int vocab, float temperature, float top_p, double u) {
  if (temperature <= 0) return Argmax(logits, vocab);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  double m = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]) * inv_t);
  std::vector<double> probs(static_cast<size_t>(vocab));
  double total = 0;
  for (int i = 0; i < vocab; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[i]) * inv_t - m);
    total += probs[i];
  }
  if (!(top_p > 0 && top_p < 1)) {
    const double target = u * total;
    double cum = 0;
    int32_t last = 0;
    for (int i = 0; i < vocab; ++i) {
      if (probs[i] <= 0) continue;
      last = i;
      cum += probs[i];
      if (target < cum) return i;
    }
    return last;  // u * total rounded up past the sum
  }
  // Nucleus: find the most probable tokens by growing a sorted prefix (most vocabularies keep
  // a few dozen tokens), ordered by probability, then index.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) order[i] = i;
  const auto more_probable = [&probs](int32_t a, int32_t b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  };
  const double need = static_cast<double>(top_p) * total;
  int kept = 0;
  double mass = 0;
  for (int64_t prefix = 64;; prefix *= 4) {
    const auto end = order.begin() + std::min<int64_t>(prefix, vocab);
    std::partial_sort(order.begin() + kept, end, order.end(), more_probable);
    const int sorted = static_cast<int>(end - order.begin());
    while (kept < sorted && mass < need) mass += probs[order[kept++]];
    if (mass >= need || sorted == vocab) break;
  }
  const double target = u * mass;
  double cum = 0;
  for (int i = 0; i < kept; ++i) {
    cum += probs[order[i]];
    if (target < cum) return order[i];
  }
  return order[kept - 1];
}

}  // namespace strata::kernels
