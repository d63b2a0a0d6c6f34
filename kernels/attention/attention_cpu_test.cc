#include "kernels/attention/attention_cpu.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/elementwise/elementwise_cpu.h"
#include "kernels/gemm/gemm_cpu.h"
#include "kernels/norm/norm_cpu.h"
#include "kernels/rope/rope_cpu.h"
#include "kernels/sampling/sampling_cpu.h"
#include "kernels/testing/attention_cpu.h"
#include "kernels/testing/elementwise_cpu.h"
#include "kernels/testing/gemm_cpu.h"
#include "kernels/testing/norm_cpu.h"
#include "kernels/testing/rope_cpu.h"
#include "kernels/testing/paged_pool.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace strata::kernels {
namespace {

std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

bool BitwiseEqual(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// The dot product the header specifies, written out lane by lane in scalar code.
float LanePatternDot(const float* x, const float* w, int n) {
  float lanes[16] = {};
  const int n16 = n / 16 * 16;
  for (int k = 0; k < n16; ++k) lanes[k % 16] += x[k] * w[k];
  for (int width = 8; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  float s = lanes[0];
  for (int k = n16; k < n; ++k) s += x[k] * w[k];
  return s;
}

// Double-precision causal attention of one query (at position pos) and one head.
void NaiveAttention(const float* q, const float* k, const float* v, int64_t stride, int first_key,
                    int end_key, int head_dim, float scale, double* out, double* lse) {
  std::vector<double> s;
  double m = -std::numeric_limits<double>::infinity();
  for (int t = first_key; t < end_key; ++t) {
    double d = 0;
    for (int i = 0; i < head_dim; ++i) d += static_cast<double>(q[i]) * k[t * stride + i];
    s.push_back(d * scale);
    m = std::max(m, s.back());
  }
  double sum = 0;
  for (double& e : s) sum += (e = std::exp(e - m));
  for (int i = 0; i < head_dim; ++i) {
    double acc = 0;
    for (int t = first_key; t < end_key; ++t) acc += s[t - first_key] * v[t * stride + i];
    out[i] = acc / sum;
  }
  *lse = m + std::log(sum);
}

struct AttentionCase {
  int num_queries, num_heads, num_kv_heads, head_dim, first_query_pos, row_padding;
};

struct AttentionData {
  AttentionCase c;
  int64_t stride;
  std::vector<float> q, k, v, out, lse;

  explicit AttentionData(const AttentionCase& ac, uint32_t seed) : c(ac) {
    stride = static_cast<int64_t>(c.num_kv_heads) * c.head_dim + c.row_padding;
    const int keys = c.first_query_pos + c.num_queries;
    q = RandomVector(static_cast<size_t>(c.num_queries) * c.num_heads * c.head_dim, seed, -2, 2);
    k = RandomVector(static_cast<size_t>(keys * stride), seed + 1, -2, 2);
    v = RandomVector(static_cast<size_t>(keys * stride), seed + 2);
    out.assign(q.size(), std::nanf(""));
    lse.assign(static_cast<size_t>(c.num_queries) * c.num_heads, std::nanf(""));
  }

  // Runs queries [first, first + n) of the case.
  void Run(int first, int n) {
    AttentionParams p{};
    const int64_t qo = static_cast<int64_t>(first) * c.num_heads * c.head_dim;
    p.q = q.data() + qo;
    p.k = k.data();
    p.v = v.data();
    p.out = out.data() + qo;
    p.lse = lse.data() + static_cast<int64_t>(first) * c.num_heads;
    p.num_queries = n;
    p.num_heads = c.num_heads;
    p.num_kv_heads = c.num_kv_heads;
    p.head_dim = c.head_dim;
    p.kv_row_stride = stride;
    p.first_query_pos = c.first_query_pos + first;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    Attention(p);
  }
};

TEST(CpuKernelsTest, RmsNormMatchesFormula) {
  const int rows = 3, dim = 37;
  const float eps = 1e-5f;
  const std::vector<float> x = RandomVector(rows * dim, 1, -3, 3);
  const std::vector<float> w = RandomVector(dim, 2);
  std::vector<float> y(x.size());
  RmsNorm(x.data(), w.data(), y.data(), rows, dim, eps);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1 / std::sqrt(ss / dim + eps);
    for (int i = 0; i < dim; ++i) {
      const double want = x[r * dim + i] * inv * w[i];
      EXPECT_NEAR(y[r * dim + i], want, 1e-5 * (1 + std::abs(want))) << "row " << r << " i " << i;
    }
  }
  // In place gives the same bits.
  std::vector<float> inplace = x;
  RmsNorm(inplace.data(), w.data(), inplace.data(), rows, dim, eps);
  EXPECT_TRUE(BitwiseEqual(inplace.data(), y.data(), y.size()));
}

TEST(CpuKernelsTest, MatMulMatchesDoubleReference) {
  const int rows = 5, in_dim = 70, out_dim = 11;
  const std::vector<float> x = RandomVector(rows * in_dim, 3);
  const std::vector<float> w = RandomVector(out_dim * in_dim, 4);
  const std::vector<float> bias = RandomVector(out_dim, 5);
  std::vector<float> out(rows * out_dim);
  MatMulWT(x.data(), w.data(), bias.data(), out.data(), rows, in_dim, out_dim);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < out_dim; ++j) {
      double want = bias[j];
      for (int k = 0; k < in_dim; ++k)
        want += static_cast<double>(x[r * in_dim + k]) * w[j * in_dim + k];
      EXPECT_NEAR(out[r * out_dim + j], want, 1e-5) << "row " << r << " out " << j;
    }
  }
}

TEST(CpuKernelsTest, MatMulFollowsTheSpecifiedLanePattern) {
  for (int in_dim : {1, 15, 16, 17, 48, 100, 256}) {
    const int rows = 3, out_dim = 9;
    const std::vector<float> x = RandomVector(rows * in_dim, 6, -10, 10);
    const std::vector<float> w = RandomVector(out_dim * in_dim, 7, -10, 10);
    std::vector<float> out(rows * out_dim);
    MatMulWT(x.data(), w.data(), nullptr, out.data(), rows, in_dim, out_dim);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < out_dim; ++j) {
        const float want = LanePatternDot(&x[r * in_dim], &w[j * in_dim], in_dim);
        const float got = out[r * out_dim + j];
        EXPECT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
            << "in_dim " << in_dim << " row " << r << " out " << j << ": " << got << " vs " << want;
      }
    }
  }
}

TEST(CpuKernelsTest, MatMulIsBatchInvariant) {
  for (int in_dim : {37, 77, 256}) {
    const int rows = 7, out_dim = 13;
    const std::vector<float> x = RandomVector(rows * in_dim, 8);
    const std::vector<float> w = RandomVector(out_dim * in_dim, 9);
    const std::vector<float> bias = RandomVector(out_dim, 10);
    std::vector<float> all(rows * out_dim), one(rows * out_dim), mid(rows * out_dim, 0.0f);
    MatMulWT(x.data(), w.data(), bias.data(), all.data(), rows, in_dim, out_dim);
    for (int r = 0; r < rows; ++r) {
      MatMulWT(&x[r * in_dim], w.data(), bias.data(), &one[r * out_dim], 1, in_dim, out_dim);
    }
    EXPECT_TRUE(BitwiseEqual(all.data(), one.data(), all.size()))
        << "in_dim " << in_dim << ": rows one at a time differ from all rows at once";
    // Rows 2..4 of the batch sit at different tile positions in a three-row call.
    MatMulWT(&x[2 * in_dim], w.data(), bias.data(), &mid[2 * out_dim], 3, in_dim, out_dim);
    EXPECT_TRUE(BitwiseEqual(&all[2 * out_dim], &mid[2 * out_dim], 3 * out_dim))
        << "in_dim " << in_dim << ": a middle run of rows differs";
    // A subset of the outputs (columns 3..) computed as its own matrix.
    const int sub = out_dim - 3;
    std::vector<float> cols(rows * sub);
    MatMulWT(x.data(), &w[3 * in_dim], &bias[3], cols.data(), rows, in_dim, sub);
    for (int r = 0; r < rows; ++r) {
      EXPECT_TRUE(BitwiseEqual(&all[r * out_dim + 3], &cols[r * sub], sub))
          << "in_dim " << in_dim << " row " << r << ": output columns depend on the column offset";
    }
  }
}

TEST(CpuKernelsTest, RopeRotatesPairsByPosition) {
  const int rows = 3, heads = 2, head_dim = 8, half = head_dim / 2;
  const std::vector<float> inv_freq = {1.0f, 0.5f, 0.1f, 0.01f};
  const std::vector<int32_t> positions = {0, 1, 1000};
  const std::vector<float> x = RandomVector(rows * heads * head_dim, 11);
  std::vector<float> y = x;
  ApplyRope(y.data(), positions.data(), rows, heads, head_dim, inv_freq.data());
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const int base = (r * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<double>(static_cast<float>(positions[r]) * inv_freq[i]);
        const double a = x[base + i], b = x[base + i + half];
        EXPECT_NEAR(y[base + i], a * std::cos(angle) - b * std::sin(angle), 1e-6)
            << "row " << r << " head " << h << " i " << i;
        EXPECT_NEAR(y[base + i + half], b * std::cos(angle) + a * std::sin(angle), 1e-6)
            << "row " << r << " head " << h << " i " << i;
      }
    }
  }
  // Position 0 is the identity.
  EXPECT_TRUE(BitwiseEqual(x.data(), y.data(), heads * head_dim));
  // Each row alone gives the same bits.
  for (int r = 0; r < rows; ++r) {
    std::vector<float> one(x.begin() + r * heads * head_dim,
                           x.begin() + (r + 1) * heads * head_dim);
    ApplyRope(one.data(), &positions[r], 1, heads, head_dim, inv_freq.data());
    EXPECT_TRUE(BitwiseEqual(one.data(), &y[r * heads * head_dim], one.size())) << "row " << r;
  }
}

TEST(CpuKernelsTest, RopeInvFreqMatchesDefaultFormula) {
  const std::vector<float> f = RopeInvFreq(64, 10000.0f, RopeScaling{});
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double want = 1.0 / std::pow(10000.0, 2.0 * i / 64);
    EXPECT_NEAR(f[i], want, 1e-6 * want) << "i " << i;
  }
}

TEST(CpuKernelsTest, RopeLlama3ScalingMatchesHfRule) {
  // Llama 3.1: theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192. Values by
  // hand from the HF rule: i=0 is high frequency (wavelen 2*pi) and stays 1; i=30 (wavelen
  // 2948) and i=32 (wavelen 4443) are medium and smoothed; i=63 (wavelen 2.56e6) is
  // divided by the factor.
  RopeScaling scaling;
  scaling.llama3 = true;
  const std::vector<float> f = RopeInvFreq(128, 500000.0f, scaling);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[30], 0.0013718935677611381, 1e-5 * 0.0013718935677611381);
  EXPECT_NEAR(f[32], 0.0005248461609929547, 1e-5 * 0.0005248461609929547);
  EXPECT_NEAR(f[63], 3.068925988914511e-07, 1e-5 * 3.068925988914511e-07);
  const std::vector<float> plain = RopeInvFreq(128, 500000.0f, RopeScaling{});
  EXPECT_EQ(f[10], plain[10]) << "a high-frequency band must be left unchanged";
}

TEST(CpuKernelsTest, SwiGluMatchesFormula) {
  const int n = 29;
  const std::vector<float> gate = RandomVector(n, 12, -6, 6), up = RandomVector(n, 13);
  std::vector<float> out(n);
  SwiGlu(gate.data(), up.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    const double g = gate[i];
    const double want = g / (1 + std::exp(-g)) * up[i];
    EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::abs(want))) << "i " << i;
  }
  std::vector<float> inplace = gate;
  SwiGlu(inplace.data(), up.data(), inplace.data(), n);
  EXPECT_TRUE(BitwiseEqual(inplace.data(), out.data(), n));
}

TEST(CpuKernelsTest, EmbedCopiesRows) {
  const int vocab = 5, dim = 3;
  const std::vector<float> table = RandomVector(vocab * dim, 14);
  const std::vector<int32_t> ids = {4, 0, 4, 2};
  std::vector<float> out(ids.size() * dim);
  Embed(table.data(), ids.data(), static_cast<int>(ids.size()), dim, out.data());
  for (size_t r = 0; r < ids.size(); ++r) {
    EXPECT_TRUE(BitwiseEqual(&out[r * dim], &table[ids[r] * dim], dim)) << "row " << r;
  }
}

TEST(CpuKernelsTest, AttentionMatchesNaiveSoftmax) {
  const AttentionCase cases[] = {
      {1, 1, 1, 16, 0, 0},   // one query, one key
      {4, 6, 2, 20, 5, 3},   // GQA, a head_dim with a tail, padded KV rows
      {9, 4, 4, 64, 30, 0},  // MHA
      {3, 8, 1, 128, 17, 8},
  };
  for (const AttentionCase& c : cases) {
    AttentionData d(c, 20);
    d.Run(0, c.num_queries);
    const int group = c.num_heads / c.num_kv_heads;
    std::vector<double> want(c.head_dim);
    for (int i = 0; i < c.num_queries; ++i) {
      for (int h = 0; h < c.num_heads; ++h) {
        const int64_t qo = (static_cast<int64_t>(i) * c.num_heads + h) * c.head_dim;
        const int64_t kvo = static_cast<int64_t>(h / group) * c.head_dim;
        double lse;
        NaiveAttention(&d.q[qo], d.k.data() + kvo, d.v.data() + kvo, d.stride, 0,
                       c.first_query_pos + i + 1, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)),
                       want.data(), &lse);
        for (int e = 0; e < c.head_dim; ++e) {
          ASSERT_NEAR(d.out[qo + e], want[e], 1e-5)
              << "head_dim " << c.head_dim << " query " << i << " head " << h << " element " << e;
        }
        ASSERT_NEAR(d.lse[i * c.num_heads + h], lse, 1e-5) << "query " << i << " head " << h;
      }
    }
  }
}

// Attention of one query and head by the operation sequence the header specifies, in scalar
// code.
void SpecAttention(const float* q, const float* k, const float* v, int64_t stride, int n_keys,
                   int head_dim, float scale, float* out, float* lse) {
  std::vector<float> s(n_keys);
  float m = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < n_keys; ++t) {
    s[t] = LanePatternDot(q, k + t * stride, head_dim) * scale;
    m = std::max(m, s[t]);
  }
  float sum = 0;
  for (int t = 0; t < n_keys; ++t) sum += (s[t] = std::exp(s[t] - m));
  for (int d = 0; d < head_dim; ++d) {
    float acc = 0;
    for (int t = 0; t < n_keys; ++t) acc += s[t] * v[t * stride + d];
    out[d] = acc / sum;
  }
  *lse = m + std::log(sum);
}

TEST(CpuKernelsTest, AttentionFollowsTheSpecifiedOperationOrder) {
  for (const AttentionCase& c : {AttentionCase{3, 4, 2, 40, 6, 1}, AttentionCase{3, 4, 2, 64, 6, 0},
                                 AttentionCase{3, 2, 2, 128, 6, 2}}) {
    AttentionData d(c, 60);
    d.Run(0, c.num_queries);
    const int group = c.num_heads / c.num_kv_heads;
    std::vector<float> want(c.head_dim);
    for (int i = 0; i < c.num_queries; ++i) {
      for (int h = 0; h < c.num_heads; ++h) {
        const int64_t qo = (static_cast<int64_t>(i) * c.num_heads + h) * c.head_dim;
        const int64_t kvo = static_cast<int64_t>(h / group) * c.head_dim;
        float lse;
        SpecAttention(&d.q[qo], d.k.data() + kvo, d.v.data() + kvo, d.stride,
                      c.first_query_pos + i + 1, c.head_dim,
                      1.0f / std::sqrt(static_cast<float>(c.head_dim)), want.data(), &lse);
        EXPECT_TRUE(BitwiseEqual(&d.out[qo], want.data(), c.head_dim))
            << "head_dim " << c.head_dim << " query " << i << " head " << h;
        EXPECT_TRUE(BitwiseEqual(&d.lse[i * c.num_heads + h], &lse, 1))
            << "head_dim " << c.head_dim << " query " << i << " head " << h;
      }
    }
  }
}

void CheckAttentionBatchInvariance(const AttentionCase& c) {
  AttentionData all(c, 30);
  all.Run(0, c.num_queries);
  // The same queries in pieces of 1, 3, 2 and 5, each call starting at a later position.
  AttentionData pieces(c, 30);
  int first = 0;
  for (int n : {1, 3, 2, 5}) {
    pieces.Run(first, n);
    first += n;
  }
  ASSERT_EQ(first, c.num_queries);
  EXPECT_TRUE(BitwiseEqual(all.out.data(), pieces.out.data(), all.out.size()))
      << "attention output differs between one call and pieces";
  EXPECT_TRUE(BitwiseEqual(all.lse.data(), pieces.lse.data(), all.lse.size()))
      << "lse differs between one call and pieces";
  // And one query at a time, as decode does.
  AttentionData single(c, 30);
  for (int i = 0; i < c.num_queries; ++i) single.Run(i, 1);
  EXPECT_TRUE(BitwiseEqual(all.out.data(), single.out.data(), all.out.size()))
      << "attention output differs between one call and one query at a time";
}

TEST(CpuKernelsTest, AttentionIsBatchInvariant) {
  // head_dim 64 and 128 take specialised code, other sizes the generic loop.
  for (const AttentionCase& c :
       {AttentionCase{11, 6, 2, 40, 7, 5}, AttentionCase{11, 4, 2, 64, 3, 0},
        AttentionCase{11, 2, 1, 128, 9, 4}}) {
    SCOPED_TRACE(testing::Message() << "head_dim " << c.head_dim);
    CheckAttentionBatchInvariance(c);
  }
}

TEST(CpuKernelsTest, AttentionLseComposesThroughMerge) {
  // One query against keys [0, n): attention over [0, m) and over [m, n), each computed by
  // the kernel as a query that sees exactly those keys, merge to attention over all keys.
  const int heads = 4, kv_heads = 2, head_dim = 24, n = 23, m = 9;
  const int64_t stride = kv_heads * head_dim;
  const std::vector<float> q = RandomVector(heads * head_dim, 40, -2, 2);
  const std::vector<float> k = RandomVector(n * stride, 41, -2, 2);
  const std::vector<float> v = RandomVector(n * stride, 42);
  auto run = [&](int first_key, int keys, float* out, float* lse) {
    AttentionParams p{};
    p.q = q.data();
    p.k = k.data() + first_key * stride;
    p.v = v.data() + first_key * stride;
    p.out = out;
    p.lse = lse;
    p.num_queries = 1;
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.kv_row_stride = stride;
    p.first_query_pos = keys - 1;
    p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    Attention(p);
  };
  std::vector<float> o_full(heads * head_dim), o1(o_full.size()), o2(o_full.size()),
      o(o_full.size());
  std::vector<float> lse_full(heads), lse1(heads), lse2(heads), lse(heads);
  run(0, n, o_full.data(), lse_full.data());
  run(0, m, o1.data(), lse1.data());
  run(m, n - m, o2.data(), lse2.data());
  MergeAttentionStates(o1.data(), lse1.data(), o2.data(), lse2.data(), o.data(), lse.data(), 1,
                       heads, head_dim);
  for (int h = 0; h < heads; ++h) {
    EXPECT_NEAR(lse[h], lse_full[h], 1e-5) << "head " << h;
    for (int e = 0; e < head_dim; ++e) {
      EXPECT_NEAR(o[h * head_dim + e], o_full[h * head_dim + e], 1e-5)
          << "head " << h << " e " << e;
    }
  }
  // Against the double reference too, so both sides cannot be wrong the same way.
  std::vector<double> want(head_dim);
  double want_lse;
  NaiveAttention(q.data(), k.data(), v.data(), stride, 0, n, head_dim,
                 1.0f / std::sqrt(static_cast<float>(head_dim)), want.data(), &want_lse);
  EXPECT_NEAR(lse[0], want_lse, 1e-5);
  for (int e = 0; e < head_dim; ++e) EXPECT_NEAR(o[e], want[e], 1e-5) << "e " << e;
}

TEST(CpuKernelsTest, MergeWithEmptyPartReturnsTheOtherPart) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int head_dim = 5;
  const std::vector<float> o1 = RandomVector(head_dim, 50), o2 = RandomVector(head_dim, 51);
  const float lse1 = 1.5f, lse2 = kNegInf;
  std::vector<float> o(head_dim);
  float lse;
  MergeAttentionStates(o1.data(), &lse1, o2.data(), &lse2, o.data(), &lse, 1, 1, head_dim);
  EXPECT_TRUE(BitwiseEqual(o.data(), o1.data(), head_dim));
  EXPECT_EQ(lse, lse1);
  const float both = kNegInf;
  MergeAttentionStates(o1.data(), &both, o2.data(), &both, o.data(), &lse, 1, 1, head_dim);
  EXPECT_EQ(lse, kNegInf);
  for (float e : o) EXPECT_EQ(e, 0.0f);
}

TEST(CpuKernelsTest, SampleTokenGreedyAndTopP) {
  // Greedy: the largest logit, the lowest index on ties; u is ignored.
  const std::vector<float> tied = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(SampleToken(tied.data(), 4, 0.0f, 0.9f, 0.99), 1);
  EXPECT_EQ(SampleToken(tied.data(), 4, -1.0f, 1.0f, 0.0), 1);

  // p = {0.5, 0.3, 0.15, 0.05} at temperature 1.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  // top_p 0.7 keeps {0, 1} (mass 0.8): renormalised 0.625 / 0.375.
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 0.7f, 0.0), 0);
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 0.7f, 0.62), 0);
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 0.7f, 0.63), 1);
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 0.7f, 0.9999), 1);
  // top_p 1 keeps all, in index order: cumulative 0.5, 0.8, 0.95, 1.
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 1.0f, 0.49), 0);
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 1.0f, 0.79), 1);
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 0.0f, 0.94), 2);
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 1.0f, 0.96), 3);
  // A high temperature flattens the distribution: token 3 becomes reachable at u = 0.9.
  EXPECT_EQ(SampleToken(logits.data(), 4, 1.0f, 1.0f, 0.9), 2);
  EXPECT_EQ(SampleToken(logits.data(), 4, 100.0f, 1.0f, 0.9), 3);

  // Many equal candidates: top_p 0.5 of 1000 keeps the 500 lowest indices.
  const std::vector<float> flat(1000, 0.25f);
  EXPECT_EQ(SampleToken(flat.data(), 1000, 0.7f, 0.5f, 0.0), 0);
  EXPECT_EQ(SampleToken(flat.data(), 1000, 0.7f, 0.5f, 0.9995), 499);
  // A token with -inf logit is never picked.
  std::vector<float> masked = {-std::numeric_limits<float>::infinity(), 0.0f};
  EXPECT_EQ(SampleToken(masked.data(), 2, 1.0f, 1.0f, 0.0), 1);
  EXPECT_EQ(SampleToken(masked.data(), 2, 1.0f, 0.5f, 0.0), 1);
}

// Float64 attention of one query head against the first `visible` tokens of sequence b.
void ReferenceRow(const test_support::PagedPool& pool, int b, int64_t visible, const float* q, int heads, int h,
                  float scale, std::vector<double>* o, double* lse) {
  const int kvh = h / (heads / pool.kv_heads), hd = pool.head_dim;
  auto at = [&](int64_t t) {
    const int64_t page = pool.indices[pool.indptr[b] + t / pool.page_size];
    return ((page * pool.page_size + t % pool.page_size) * pool.kv_heads + kvh) * hd;
  };
  std::vector<double> s(static_cast<size_t>(visible));
  double m = -1e300;
  for (int64_t t = 0; t < visible; ++t) {
    double dot = 0;
    for (int d = 0; d < hd; ++d) dot += q[h * hd + d] * static_cast<double>(Bf16ToFloat(pool.k[at(t) + d]));
    s[t] = dot * scale;
    m = std::max(m, s[t]);
  }
  double sum = 0;
  o->assign(hd, 0.0);
  for (int64_t t = 0; t < visible; ++t) {
    const double e = std::exp(s[t] - m);
    sum += e;
    for (int d = 0; d < hd; ++d) (*o)[d] += e * Bf16ToFloat(pool.v[at(t) + d]);
  }
  for (double& x : *o) x /= sum;
  *lse = m + std::log(sum);
}

TEST(CpuKernelsTest, PagedDecodeAttentionMatchesADoubleReference) {
  const std::vector<int64_t> lengths = {1, 17, 300};
  const int kv_heads = 2, heads = 8, head_dim = 64, page_size = 16;
  const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, page_size, kv_heads, head_dim, 5);
  const PagedKv kv = pool.View();
  const int batch = static_cast<int>(lengths.size());
  const std::vector<float> q = RandomVector(static_cast<size_t>(batch) * heads * head_dim, 6);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(batch) * heads);
  const float scale = 1.0f / 8.0f;
  PagedDecodeAttention(q.data(), kv, batch, heads, scale, out.data(), lse.data());
  for (int b = 0; b < batch; ++b) {
    EXPECT_EQ(PagedSequenceLength(kv, b), lengths[b]);
    for (int h = 0; h < heads; ++h) {
      std::vector<double> o;
      double l = 0;
      ReferenceRow(pool, b, lengths[b], q.data() + b * heads * head_dim, heads, h, scale, &o, &l);
      for (int d = 0; d < head_dim; ++d) EXPECT_NEAR(out[(b * heads + h) * head_dim + d], o[d], 1e-5);
      EXPECT_NEAR(lse[b * heads + h], l, 1e-5);
    }
  }
}

TEST(CpuKernelsTest, PagedPrefillAttentionIsCausalOverCachedAndNewTokens) {
  // Sequence lengths include the new tokens: 3 new of 3, 5 new of 40, 1 new of 17.
  const std::vector<int64_t> lengths = {3, 40, 17};
  const std::vector<int32_t> qo_indptr = {0, 3, 8, 9};
  const int kv_heads = 2, heads = 4, head_dim = 64, page_size = 16;
  const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, page_size, kv_heads, head_dim, 9);
  const int rows = qo_indptr.back();
  const std::vector<float> q = RandomVector(static_cast<size_t>(rows) * heads * head_dim, 10);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(rows) * heads);
  PagedPrefillAttention(q.data(), pool.View(), qo_indptr.data(), 3, heads, 0.125f, out.data(), lse.data());
  for (int b = 0; b < 3; ++b) {
    for (int r = qo_indptr[b]; r < qo_indptr[b + 1]; ++r) {
      const int64_t visible = lengths[b] - (qo_indptr[b + 1] - 1 - r);
      for (int h = 0; h < heads; ++h) {
        std::vector<double> o;
        double l = 0;
        ReferenceRow(pool, b, visible, q.data() + r * heads * head_dim, heads, h, 0.125f, &o, &l);
        for (int d = 0; d < head_dim; ++d) EXPECT_NEAR(out[(r * heads + h) * head_dim + d], o[d], 1e-5) << r;
        EXPECT_NEAR(lse[r * heads + h], l, 1e-5);
      }
    }
  }
}

TEST(CpuKernelsTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3f80);  // halfway: to the even neighbour
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3f82);  // halfway: up to the even neighbour
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-3.140625f)), -3.140625f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

TEST(CpuKernelsTest, PlaceKvPagedRotatesKAndScattersToTheSlots) {
  const int n = 5, kv_heads = 2, head_dim = 16, pool_slots = 12;
  const int64_t row = kv_heads * head_dim;
  const std::vector<float> k = RandomVector(n * row, 1), v = RandomVector(n * row, 2);
  const std::vector<int32_t> positions = {0, 7, 100, 4095, 3};
  const std::vector<int64_t> slots = {11, 0, 5, 6, 2};
  const std::vector<float> inv_freq = RopeInvFreq(head_dim, 10000.0f, RopeScaling{});
  std::vector<uint16_t> kp(pool_slots * row, 0xdead), vp(pool_slots * row, 0xdead);
  PlaceKvPaged(k.data(), v.data(), positions.data(), slots.data(), n, kv_heads, head_dim, inv_freq.data(), kp.data(),
               vp.data());
  std::vector<bool> written(pool_slots, false);
  for (int i = 0; i < n; ++i) {
    written[slots[i]] = true;
    for (int h = 0; h < kv_heads; ++h) {
      for (int d = 0; d < head_dim / 2; ++d) {
        const int64_t src = i * row + h * head_dim, dst = slots[i] * row + h * head_dim;
        const double angle = static_cast<double>(positions[i]) * inv_freq[d];
        const double a = k[src + d], b = k[src + d + head_dim / 2];
        // Within one bf16 unit (2^-8 relative) of the exact rotation.
        EXPECT_NEAR(Bf16ToFloat(kp[dst + d]), a * std::cos(angle) - b * std::sin(angle), 1.5 / 256);
        EXPECT_NEAR(Bf16ToFloat(kp[dst + d + head_dim / 2]), b * std::cos(angle) + a * std::sin(angle), 1.5 / 256);
        EXPECT_EQ(vp[dst + d], FloatToBf16(v[src + d]));
      }
    }
  }
  for (int s = 0; s < pool_slots; ++s) {
    if (!written[s]) EXPECT_EQ(kp[s * row], 0xdead) << "slot " << s << " was not to be written";
  }
}

TEST(CpuKernelsTest, AddRmsNormUpdatesTheResidualThenNormalisesIt) {
  const int rows = 3, dim = 37;
  const std::vector<float> x = RandomVector(rows * dim, 31), w = RandomVector(dim, 32);
  std::vector<float> residual = RandomVector(rows * dim, 33), y(rows * dim);
  std::vector<float> want_residual(rows * dim), want(rows * dim);
  for (int i = 0; i < rows * dim; ++i) want_residual[i] = residual[i] + x[i];
  RmsNorm(want_residual.data(), w.data(), want.data(), rows, dim, 1e-5f);
  AddRmsNorm(x.data(), residual.data(), w.data(), y.data(), rows, dim, 1e-5f);
  EXPECT_EQ(residual, want_residual);
  EXPECT_EQ(y, want);
  // In place over x.
  std::vector<float> x2 = x, residual2 = RandomVector(rows * dim, 33);
  AddRmsNorm(x2.data(), residual2.data(), w.data(), x2.data(), rows, dim, 1e-5f);
  EXPECT_EQ(x2, want);
}

}  // namespace
}  // namespace strata::kernels
