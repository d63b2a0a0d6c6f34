#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/rope/rope_cpu.h"
#include "storage/chunk_format.h"

#include "model/cpu/cpu_model.h"
#include "model/model_config.h"
#include "model/testing/tiny_config.h"
#include "model/model_weights.h"
#include "text/tokenizer.h"
#include "gtest/gtest.h"

namespace strata::model {
namespace {

using testing::TinyConfig;

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 37 + 11) % 256;
  return p;
}

TEST(ModelConfigTest, BuiltinValidates) { EXPECT_TRUE(ModelConfig::Builtin().Validate().ok()); }

// random:NAME shapes: the real models' sizes, valid, and unknown names refused by name.
TEST(ModelConfigTest, NamedShapesAreTheRealModelsShapes) {
  auto eight = ModelConfig::Named("llama3-8b");
  ASSERT_TRUE(eight.ok()) << eight.status();
  EXPECT_TRUE(eight->Validate().ok()) << eight->Validate();
  EXPECT_EQ(eight->num_layers, 32);
  EXPECT_EQ(eight->kv_dim(), 1024);
  EXPECT_EQ(eight->vocab_size, 128256);
  EXPECT_TRUE(eight->rope_scaling.llama3);
  auto one = ModelConfig::Named("llama3-1b");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->Validate().ok());
  EXPECT_TRUE(one->tie_embeddings);
  EXPECT_EQ(one->head_dim, 64);
  auto builtin = ModelConfig::Named("builtin");
  ASSERT_TRUE(builtin.ok());
  EXPECT_EQ(builtin->CanonicalString(), ModelConfig::Builtin().CanonicalString());
  auto unknown = ModelConfig::Named("llama9");
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status()));
  EXPECT_NE(unknown.status().message().find("llama3-8b"), std::string::npos) << unknown.status();
}

TEST(ModelConfigTest, ParsesHfConfigJson) {
  auto c = ModelConfig::FromHfConfigJson(R"({
    "architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 256, "max_position_embeddings": 2048, "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_TRUE(c->rope_scaling.llama3);
  EXPECT_EQ(c->rope_scaling.original_max_position, 1024);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
}

TEST(ModelConfigTest, NamesTheMissingOrBadField) {
  auto missing = ModelConfig::FromHfConfigJson(R"({"vocab_size": 10})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("hidden_size"), std::string::npos) << missing.status();
  auto gqa = ModelConfig::FromHfConfigJson(R"({"vocab_size": 10, "hidden_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 3,
    "intermediate_size": 8, "max_position_embeddings": 64})");
  ASSERT_FALSE(gqa.ok());
  EXPECT_NE(gqa.status().message().find("num_key_value_heads"), std::string::npos) << gqa.status();
  EXPECT_FALSE(ModelConfig::FromHfConfigJson("not json").ok());
}

TEST(ModelWeightsTest, SeedDeterminesWeightsAndFingerprint) {
  ModelConfig c = TinyConfig();
  ModelWeights a = ModelWeights::Random(c, 1, {});
  ModelWeights b = ModelWeights::Random(c, 1, {});
  ModelWeights other = ModelWeights::Random(c, 2, {});
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), other.fingerprint());
  EXPECT_EQ(0, std::memcmp(a.layer(1).wq, b.layer(1).wq, sizeof(float) * c.q_dim() * c.hidden_size));
  ModelConfig wider = c;
  wider.max_context = 512;  // same weights, other config: another model
  EXPECT_NE(ModelWeights::Random(wider, 1, {}).fingerprint(), a.fingerprint());
}

TEST(ModelWeightsTest, SilentTokensHaveZeroHeadRows) {
  ModelConfig c = TinyConfig();
  ModelWeights w = ModelWeights::Random(c, 1, {3, 7});
  for (int i = 0; i < c.hidden_size; ++i) {
    EXPECT_EQ(w.lm_head()[3 * c.hidden_size + i], 0.0f);
    EXPECT_EQ(w.lm_head()[7 * c.hidden_size + i], 0.0f);
  }
}

// The property the session cache rests on: KV and logits of a token do not depend on how
// the prompt was cut into steps or what else was in the batch.
TEST(CpuModelTest, SplitPrefillAndDecodeEqualOneShotPrefill) {
  ModelConfig c = TinyConfig();
  CpuModel model(ModelWeights::Random(c, 7, {}));
  const std::vector<int32_t> prompt = Prompt(23);
  SequenceKv whole(c.num_layers, c.kv_dim(), 32);
  std::vector<float> logits_whole(c.vocab_size);
  ForwardEntry e{&whole, 0, prompt, logits_whole.data()};
  ASSERT_TRUE(model.Forward({&e, 1}).ok());

  SequenceKv pieces(c.num_layers, c.kv_dim(), 32);
  SequenceKv other(c.num_layers, c.kv_dim(), 32);  // a bystander in the same batch
  std::vector<int32_t> other_prompt = Prompt(9);
  std::vector<float> logits_pieces(c.vocab_size);
  int64_t pos = 0;
  for (int n : {5, 1, 9, 1, 1, 6}) {
    absl::Span<const int32_t> part(prompt.data() + pos, n);
    bool last = pos + n == static_cast<int64_t>(prompt.size());
    ForwardEntry batch[2] = {{&other, 0, other_prompt, nullptr},
                             {&pieces, pos, part, last ? logits_pieces.data() : nullptr}};
    ASSERT_TRUE(model.Forward(batch).ok());
    pos += n;
  }
  ASSERT_EQ(pos, 23);
  EXPECT_EQ(0, std::memcmp(logits_whole.data(), logits_pieces.data(), sizeof(float) * c.vocab_size))
      << "logits differ between one-shot and split prefill";
  for (int l = 0; l < c.num_layers; ++l) {
    EXPECT_EQ(0, std::memcmp(whole.k_raw(l, 0), pieces.k_raw(l, 0), sizeof(float) * 23 * c.kv_dim()))
        << "layer " << l;
    EXPECT_EQ(0, std::memcmp(whole.k_rot(l, 0), pieces.k_rot(l, 0), sizeof(float) * 23 * c.kv_dim()));
    EXPECT_EQ(0, std::memcmp(whole.v(l, 0), pieces.v(l, 0), sizeof(float) * 23 * c.kv_dim()));
  }
}

TEST(CpuModelTest, PlacedKvEqualsComputedKv) {
  ModelConfig c = TinyConfig();
  CpuModel model(ModelWeights::Random(c, 7, {}));
  const std::vector<int32_t> prompt = Prompt(12);
  SequenceKv computed(c.num_layers, c.kv_dim(), 16);
  ForwardEntry e{&computed, 0, prompt, nullptr};
  ASSERT_TRUE(model.Forward({&e, 1}).ok());
  SequenceKv placed(c.num_layers, c.kv_dim(), 16);
  for (int l = 0; l < c.num_layers; ++l)
    for (int t = 0; t < 12; ++t) model.PlaceLoadedKv(placed, l, t, computed.k_raw(l, t), computed.v(l, t));
  for (int l = 0; l < c.num_layers; ++l) {
    EXPECT_EQ(0, std::memcmp(computed.k_rot(l, 0), placed.k_rot(l, 0), sizeof(float) * 12 * c.kv_dim()))
        << "rotating stored pre-RoPE K must give the K attention used, layer " << l;
  }
  // Pre-RoPE K really is position-free: it differs from the rotated K past position 0.
  EXPECT_NE(0, std::memcmp(computed.k_rot(0, 5), computed.k_raw(0, 5), sizeof(float) * c.kv_dim()));
}


// A conversation cut to fit the context window places its kept tokens' stored KV at new,
// earlier positions, from the middle of a chunk: K before RoPE and V arrive as stored, and
// K is rotated for the new position (RoPE of the stored K, to fp32 rounding; with llama3
// frequency scaling too). Layer 0's K depends on the token alone, so there it is bit for
// bit the K the model computes for that token at that position.
class RepositionTest : public ::testing::TestWithParam<bool> {};

TEST_P(RepositionTest, KvLoadedFromInsideAChunkIsRotatedForItsNewPosition) {
  ModelConfig c = TinyConfig();
  if (GetParam()) {
    c.rope_scaling.llama3 = true;
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position = 32;  // so that the scaling changes frequencies here
  }
  CpuModel model(ModelWeights::Random(c, 7, {}));
  const std::vector<int32_t> prompt = Prompt(40);
  SequenceKv old(c.num_layers, c.kv_dim(), 40);
  ForwardEntry e{&old, 0, prompt, nullptr};
  ASSERT_TRUE(model.Forward({&e, 1}).ok());
  // Old tokens [16, 32) in one chunk; its rows 5..14 (old positions 21..30) go to 3..12.
  const storage::ChunkLayout layout{
      .layers = c.num_layers, .chunk_tokens = 16, .row_bytes = static_cast<int64_t>(c.kv_dim() * sizeof(float))};
  std::vector<std::byte> payload(static_cast<size_t>(layout.PayloadBytes()));
  ASSERT_TRUE(model.SaveKv(old, 16, 16, absl::MakeSpan(payload), layout).ok());
  SequenceKv moved(c.num_layers, c.kv_dim(), 40);
  ASSERT_TRUE(model.LoadKvRows(moved, 3, 10, payload, layout, 5).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(model.LoadKvRows(moved, 3, 10, payload, layout, 7)))
      << "rows past the chunk's end are refused";

  const std::vector<float> inv_freq = kernels::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling);
  const int half = c.head_dim / 2;
  for (int l = 0; l < c.num_layers; ++l) {
    for (int i = 0; i < 10; ++i) {
      const int64_t to = 3 + i, from = 21 + i;
      ASSERT_EQ(0, std::memcmp(moved.k_raw(l, to), old.k_raw(l, from), sizeof(float) * c.kv_dim()));
      ASSERT_EQ(0, std::memcmp(moved.v(l, to), old.v(l, from), sizeof(float) * c.kv_dim()));
      for (int h = 0; h < c.num_kv_heads; ++h) {
        const float* raw = old.k_raw(l, from) + h * c.head_dim;
        const float* rot = moved.k_rot(l, to) + h * c.head_dim;
        for (int j = 0; j < half; ++j) {
          const double angle = static_cast<double>(to) * inv_freq[static_cast<size_t>(j)];
          const double a = raw[j], b = raw[j + half];
          const double want_lo = a * std::cos(angle) - b * std::sin(angle);
          const double want_hi = b * std::cos(angle) + a * std::sin(angle);
          const double tolerance = 2e-6 * (std::abs(a) + std::abs(b)) + 1e-30;  // the angle is a float
          EXPECT_NEAR(rot[j], want_lo, tolerance) << "layer " << l << " position " << to << " head " << h << " i " << j;
          EXPECT_NEAR(rot[j + half], want_hi, tolerance) << "layer " << l << " position " << to << " head " << h;
        }
      }
    }
  }
  // The model's own K for those tokens at those positions, layer 0.
  std::vector<int32_t> shifted(prompt.begin(), prompt.begin() + 3);
  shifted.insert(shifted.end(), prompt.begin() + 21, prompt.begin() + 31);
  SequenceKv fresh(c.num_layers, c.kv_dim(), 40);
  ForwardEntry f{&fresh, 0, shifted, nullptr};
  ASSERT_TRUE(model.Forward({&f, 1}).ok());
  EXPECT_EQ(0, std::memcmp(fresh.k_rot(0, 3), moved.k_rot(0, 3), sizeof(float) * 10 * c.kv_dim()))
      << "layer 0's moved K is the K computed at the new position";
  // Deeper layers attended to other tokens before the cut: their KV is the stored one,
  // not a recomputation (AttentionStore's approximation).
  EXPECT_NE(0, std::memcmp(fresh.k_raw(1, 3), moved.k_raw(1, 3), sizeof(float) * 10 * c.kv_dim()));
}

INSTANTIATE_TEST_SUITE_P(DefaultAndLlama3Rope, RepositionTest, ::testing::Bool());

}  // namespace
}  // namespace strata::model
