// SplitMix64: a small, fast, well-known generator; reproducible weights and sampling.
#ifndef STRATA_BASE_RANDOM_H_
#define STRATA_BASE_RANDOM_H_

#include <cstdint>

namespace strata {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [-1, 1).
  float Symmetric() { return static_cast<float>((Next() >> 40) * 0x1.0p-24 * 2.0 - 1.0); }

 private:
  uint64_t state_;
};

}  // namespace strata

#endif  // STRATA_BASE_RANDOM_H_
