// Relay attention on the CPU against plain attention over the concatenated KV (the prefix's
// keys, then the sequence's own) and against a double-precision reference.
#include "kernels/attention/relay_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/attention_cpu.h"

namespace strata::kernels {
namespace {

struct Case {
  int batch, prefix_len, max_context, group, head_dim;
  float scale_factor = 1.0f;  // > 1: a sharp softmax
};

std::string Name(const Case& c) {
  return "batch " + std::to_string(c.batch) + " prefix " + std::to_string(c.prefix_len) + " context " +
         std::to_string(c.max_context) + " group " + std::to_string(c.group) + " head_dim " +
         std::to_string(c.head_dim) + " sharpness " + std::to_string(c.scale_factor);
}

// Double-precision attention of one query row and head against keys [0, n) of `k`/`v`.
void Reference(const float* q, const float* k, const float* v, int64_t stride, int n, int head_dim, double scale,
               double* out) {
  std::vector<double> s(static_cast<size_t>(n));
  double m = -std::numeric_limits<double>::infinity();
  for (int t = 0; t < n; ++t) {
    double d = 0;
    for (int i = 0; i < head_dim; ++i) d += static_cast<double>(q[i]) * k[t * stride + i];
    s[t] = d * scale;
    m = std::max(m, s[t]);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - m));
  for (int i = 0; i < head_dim; ++i) {
    double acc = 0;
    for (int t = 0; t < n; ++t) acc += s[t] * v[t * stride + i];
    out[i] = acc / sum;
  }
}

void Check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(Name(c));
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0, 1);
  const int kv_heads = 2, heads = kv_heads * c.group, hd = c.head_dim;
  const int64_t stride = int64_t{kv_heads} * hd;
  const float scale = c.scale_factor / std::sqrt(static_cast<float>(hd));
  // Each sequence: the prefix's rows then its own (context) rows, contiguous, so plain
  // attention can run over the concatenation; the relay reads the prefix from sequence 0's.
  std::uniform_int_distribution<int> context(1, c.max_context);
  std::vector<RelaySequence> seqs;
  std::vector<std::vector<float>> ks, vs;
  std::vector<float> prefix_k(static_cast<size_t>(c.prefix_len * stride)), prefix_v(prefix_k.size());
  for (float& x : prefix_k) x = normal(gen);
  for (float& x : prefix_v) x = normal(gen);
  int64_t rows = 0;
  for (int b = 0; b < c.batch; ++b) {
    const int own = context(gen);
    // Decode (one query) for even sequences, a prefill chunk for odd ones; sequence 1 of
    // a batch > 1 starts its context with its first query (no earlier own keys).
    const int queries = b % 2 == 0 ? 1 : std::max(1, own / 2);
    const int first = b == 1 ? 0 : own - queries;
    std::vector<float> k(prefix_k), v(prefix_v);
    k.resize(static_cast<size_t>((c.prefix_len + first + queries) * stride));
    v.resize(k.size());
    for (size_t i = prefix_k.size(); i < k.size(); ++i) k[i] = normal(gen), v[i] = normal(gen);
    ks.push_back(std::move(k));
    vs.push_back(std::move(v));
    seqs.push_back(RelaySequence{rows, queries, nullptr, nullptr, first});
    rows += queries;
  }
  for (int b = 0; b < c.batch; ++b) {
    seqs[b].k = ks[b].data() + c.prefix_len * stride;
    seqs[b].v = vs[b].data() + c.prefix_len * stride;
  }
  std::vector<float> q(static_cast<size_t>(rows * heads * hd));
  for (float& x : q) x = normal(gen);

  std::vector<float> relay(q.size()), relay_lse(static_cast<size_t>(rows * heads));
  RelayAttentionParams p{};
  p.q = q.data();
  p.out = relay.data();
  p.lse = relay_lse.data();
  p.prefix_k = prefix_k.data();
  p.prefix_v = prefix_v.data();
  p.prefix_len = c.prefix_len;
  p.seqs = seqs.data();
  p.num_seqs = c.batch;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.kv_row_stride = stride;
  p.scale = scale;
  RelayAttention(p);

  double worst_plain = 0, worst_ref = 0, worst_plain_ref = 0, worst_lse = 0;
  for (int b = 0; b < c.batch; ++b) {
    const RelaySequence& s = seqs[b];
    std::vector<float> plain(static_cast<size_t>(s.num_queries * heads * hd)),
        plain_lse(static_cast<size_t>(s.num_queries * heads));
    AttentionParams a{};
    a.q = q.data() + s.first_row * heads * hd;
    a.k = ks[b].data();
    a.v = vs[b].data();
    a.out = plain.data();
    a.lse = plain_lse.data();
    a.num_queries = s.num_queries;
    a.num_heads = heads;
    a.num_kv_heads = kv_heads;
    a.head_dim = hd;
    a.kv_row_stride = stride;
    a.first_query_pos = c.prefix_len + s.first_query_pos;
    a.scale = scale;
    Attention(a);
    std::vector<double> ref(static_cast<size_t>(hd));
    for (int i = 0; i < s.num_queries; ++i) {
      for (int h = 0; h < heads; ++h) {
        const int64_t o = ((s.first_row + i) * heads + h) * hd;
        const int64_t po = (int64_t{i} * heads + h) * hd;
        const int kvo = h / c.group * hd;
        Reference(q.data() + o, ks[b].data() + kvo, vs[b].data() + kvo, stride,
                  c.prefix_len + s.first_query_pos + i + 1, hd, scale, ref.data());
        for (int d = 0; d < hd; ++d) {
          worst_plain = std::max(worst_plain, std::abs(static_cast<double>(relay[o + d]) - plain[po + d]));
          worst_ref = std::max(worst_ref, std::abs(relay[o + d] - ref[d]));
          worst_plain_ref = std::max(worst_plain_ref, std::abs(plain[po + d] - ref[d]));
        }
        worst_lse = std::max(worst_lse, std::abs(static_cast<double>(relay_lse[(s.first_row + i) * heads + h]) -
                                                 plain_lse[int64_t{i} * heads + h]) /
                                            std::max(1.0f, std::abs(plain_lse[int64_t{i} * heads + h])));
      }
    }
  }
  EXPECT_LE(worst_plain, 1e-5) << "relay vs plain attention over the concatenated KV";
  // fp32 scores carry a rounding error that a sharp softmax amplifies for plain attention
  // too: the relay may be off the reference by what plain attention is, plus 1e-5.
  EXPECT_LE(worst_ref, 1e-5 + worst_plain_ref) << "relay vs the double-precision reference";
  EXPECT_LE(worst_lse, 1e-6) << "log-sum-exp (relative)";
}

TEST(RelayAttentionTest, EqualsPlainAttentionOverTheConcatenatedKv) {
  uint32_t seed = 1;
  for (int batch : {1, 2, 8, 64}) {
    for (int prefix : {0, 1, 37, 512}) {
      for (int group : {1, 4, 8}) {
        for (int head_dim : {64, 128}) {
          Check({batch, prefix, batch >= 8 ? 24 : 300, group, head_dim}, seed++);
        }
      }
    }
  }
}

TEST(RelayAttentionTest, LongPrefixesAndContexts) {
  Check({2, 8192, 64, 2, 128}, 101);
  Check({3, 1024, 2048, 8, 64}, 102);
}

TEST(RelayAttentionTest, AGroupOfOneAndAnEmptyContext) {
  // One sequence whose only own key is its query's (first_query_pos 0 for sequence 1 is
  // covered by the grid; here the whole group is one decode at own position 0).
  Check({1, 200, 1, 4, 64}, 7);
  Check({2, 200, 1, 1, 128}, 8);
}

TEST(RelayAttentionTest, ASharpSoftmax) {
  Check({8, 300, 200, 4, 128, 16.0f}, 9);
  Check({4, 37, 50, 8, 64, 40.0f}, 10);
}

}  // namespace
}  // namespace strata::kernels
