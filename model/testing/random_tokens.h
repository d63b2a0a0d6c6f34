// Deterministic random token IDs for the model's tests.
#ifndef STRATA_MODEL_TESTING_RANDOM_TOKENS_H_
#define STRATA_MODEL_TESTING_RANDOM_TOKENS_H_

#include <cstdint>
#include <random>
#include <vector>

namespace strata::model::testing {

inline std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

}  // namespace strata::model::testing

#endif  // STRATA_MODEL_TESTING_RANDOM_TOKENS_H_
