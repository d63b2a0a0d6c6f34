// The CUDA backend tests' fixture and helpers (cuda_model_test.cc, cuda_model_kv_test.cc):
// the built-in model's config, token streams, a small KV pool, per-step logits, and the
// CUDA-against-CPU check. Test-only. The fixture skips, saying so, without a GPU.
#ifndef STRATA_MODEL_CUDA_CUDA_MODEL_TEST_SUPPORT_H_
#define STRATA_MODEL_CUDA_CUDA_MODEL_TEST_SUPPORT_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "model/cuda/cuda_model.h"

namespace strata::model::test_support {

class CudaModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaModel::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU backend tests skipped";
  }
  static ModelConfig Config(bool bias = false) {
    ModelConfig c = ModelConfig::Builtin();  // 4 layers, hidden 256, 4 q / 2 kv heads of 64
    c.qkv_bias = bias;
    return c;
  }
  static std::vector<int32_t> Tokens(int n, int salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[i] = 32 + (i * 37 + salt * 11) % 90;
    return t;
  }
  static CudaModelOptions SmallPool() {
    CudaModelOptions o;
    o.kv_pool_bytes = 64 << 20;
    o.initial_step_tokens = 256;
    return o;
  }
};

inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    den += double{want[i]} * want[i];
  }
  return std::sqrt(num / den);
}

inline int Argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// Logits after a prefill and then after each decode step, one sequence.
inline std::vector<std::vector<float>> StepLogits(ModelBackend& m, const std::vector<int32_t>& tokens, int prefill) {
  std::vector<std::vector<float>> out;
  auto seq = m.NewSequence(static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return out;
  int64_t pos = 0;
  while (pos < static_cast<int64_t>(tokens.size())) {
    const int n = pos == 0 ? prefill : 1;
    std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
    int32_t greedy = -1;
    ForwardEntry e{seq->get(), pos, absl::Span<const int32_t>(tokens.data() + pos, n), logits.data(), &greedy};
    absl::Status s = m.Forward({&e, 1});
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(greedy, Argmax(logits)) << "the device argmax names the largest logit";
    out.push_back(std::move(logits));
    pos += n;
  }
  return out;
}

// The CUDA and CPU backends on the same weights, a prefill of `prefill` tokens then one
// decode step per token: bf16 weights and KV against fp32 give ~1e-2 relative error, and the
// top-1 token agrees at all but two steps.
inline void ExpectCudaMatchesCpu(ModelWeights weights, const CudaModelOptions& options, const std::vector<int32_t>& tokens,
                          int prefill, const std::string& what) {
  auto cuda = CudaModel::Create(weights, options);
  ASSERT_TRUE(cuda.ok()) << what << ": " << cuda.status();
  CpuModel cpu(std::move(weights));
  auto want = StepLogits(cpu, tokens, prefill);
  auto got = StepLogits(**cuda, tokens, prefill);
  ASSERT_EQ(got.size(), want.size()) << what;
  int agree = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, RelativeError(got[i], want[i]));
    agree += Argmax(got[i]) == Argmax(want[i]);
  }
  EXPECT_LT(worst, 3e-2) << what;
  EXPECT_GE(agree, static_cast<int>(got.size()) - 2) << what << ": top-1 agreement " << agree << "/" << got.size();
  std::printf("%s: worst relative error %.3g, top-1 agreement %d/%zu\n", what.c_str(), worst, agree, got.size());
}

}  // namespace strata::model::test_support

#endif  // STRATA_MODEL_CUDA_CUDA_MODEL_TEST_SUPPORT_H_
