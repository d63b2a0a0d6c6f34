#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/cpu/cpu_model.h"
#include "model/model_weights.h"
#include "model/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/testing/temp_dir.h"

namespace strata::model {
namespace {

ModelConfig Small(const std::string& architecture = "LlamaForCausalLM") {
  ModelConfig c;
  c.architecture = architecture;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.max_context = 128;
  c.rope_theta = 500000.0f;
  c.rms_norm_eps = 1e-5f;
  return c;
}

class ModelLoaderTest : public ::testing::Test {
 protected:
  std::string Dir(const std::string& name) { return tmp_.path() + "/" + name; }
  storage::testing::TempDir tmp_{"strata-model"};
};

TEST(SafetensorsTest, HalfConversionsRoundToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f, 0.33325195f}) {
    EXPECT_EQ(F16ToFloat(FloatToF16(f)), f) << f;
  }
  EXPECT_EQ(FloatToF16(1e6f), 0x7c00);                      // overflows to infinity
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBf16(1.00390625f), FloatToBf16(1.0f));   // a tie rounds to even
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3f82);              // a tie rounds up to even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-3.140625f)), -3.140625f);
}

TEST_F(ModelLoaderTest, Fp32DirectoryLoadsBitExact) {
  ModelWeights w = ModelWeights::Random(Small(), 7, {});
  ASSERT_TRUE(w.WriteDirectory(Dir("f32"), DType::kF32).ok());
  auto loaded = ModelWeights::LoadDirectory(Dir("f32"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->fingerprint(), w.fingerprint());
  EXPECT_EQ(loaded->config().CanonicalString(), w.config().CanonicalString());
}

TEST_F(ModelLoaderTest, ShardedDirectoryThroughItsIndexLoadsTheSame) {
  ModelWeights w = ModelWeights::Random(Small(), 8, {});
  ASSERT_TRUE(w.WriteDirectory(Dir("sharded"), DType::kF32, 3).ok());
  EXPECT_TRUE(std::filesystem::exists(Dir("sharded") + "/model.safetensors.index.json"));
  EXPECT_TRUE(std::filesystem::exists(Dir("sharded") + "/model-3-of-3.safetensors"));
  auto loaded = ModelWeights::LoadDirectory(Dir("sharded"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->fingerprint(), w.fingerprint());
}

TEST_F(ModelLoaderTest, HalfPrecisionWeightsAreWidenedExactly) {
  ModelWeights w = ModelWeights::Random(Small(), 9, {});
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::string dir = Dir(DTypeName(dtype));
    ASSERT_TRUE(w.WriteDirectory(dir, dtype).ok());
    auto loaded = ModelWeights::LoadDirectory(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const int64_t n = int64_t{w.config().vocab_size} * w.config().hidden_size;
    for (int64_t i = 0; i < n; i += 7) {
      const float want = dtype == DType::kBF16 ? Bf16ToFloat(FloatToBf16(w.embedding()[i]))
                                               : F16ToFloat(FloatToF16(w.embedding()[i]));
      ASSERT_EQ(loaded->embedding()[i], want) << i;
    }
    EXPECT_NE(loaded->fingerprint(), w.fingerprint());  // different numbers, different KV
  }
}

TEST_F(ModelLoaderTest, Qwen2BiasTiedEmbeddingsAndLlama3RopeScalingRoundTrip) {
  ModelConfig c = Small("Qwen2ForCausalLM");
  c.qkv_bias = true;
  c.tie_embeddings = true;
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position = 64;
  ModelWeights w = ModelWeights::Random(c, 10, {});
  ASSERT_TRUE(w.WriteDirectory(Dir("qwen2"), DType::kF32).ok());
  auto loaded = ModelWeights::LoadDirectory(Dir("qwen2"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->fingerprint(), w.fingerprint());
  EXPECT_TRUE(loaded->config().qkv_bias);
  EXPECT_TRUE(loaded->config().rope_scaling.llama3);
  EXPECT_EQ(loaded->lm_head(), loaded->embedding());
}

// Qwen3: the per-head q and k norms' weights are read (and written) by name, the config
// says so and the fingerprint covers it, and the norms change what the model computes.
TEST_F(ModelLoaderTest, Qwen3QkNormsRoundTripAndMatter) {
  ModelConfig c = Small("Qwen3ForCausalLM");
  c.qk_norm = true;
  ModelWeights w = ModelWeights::Random(c, 12, {});
  ASSERT_TRUE(w.WriteDirectory(Dir("qwen3"), DType::kF32).ok());
  auto loaded = ModelWeights::LoadDirectory(Dir("qwen3"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->config().qk_norm);
  EXPECT_FALSE(loaded->config().qkv_bias) << "Qwen3 has no QKV bias unless attention_bias says so";
  EXPECT_EQ(loaded->fingerprint(), w.fingerprint());
  ASSERT_NE(loaded->layer(1).k_norm, nullptr);
  for (int i = 0; i < c.head_dim; ++i) EXPECT_EQ(loaded->layer(1).k_norm[i], w.layer(1).k_norm[i]);
  ModelConfig plain = c;
  plain.qk_norm = false;
  EXPECT_NE(ModelWeights::Random(plain, 12, {}).fingerprint(), w.fingerprint());

  // The same weights with the norms' weights set to one give other logits.
  auto logits = [&](ModelWeights weights) {
    CpuModel m(std::move(weights));
    auto seq = m.NewSequence(8);
    std::vector<int32_t> tokens = {1, 5, 9, 2, 7};
    std::vector<float> out(static_cast<size_t>(c.vocab_size));
    ForwardEntry e{seq->get(), 0, tokens, out.data()};
    EXPECT_TRUE(m.Forward({&e, 1}).ok());
    return out;
  };
  ModelWeights ones = *ModelWeights::LoadDirectory(Dir("qwen3"));
  for (int l = 0; l < c.num_layers; ++l) {
    for (const float* n : {ones.layer(l).q_norm, ones.layer(l).k_norm}) {
      for (int i = 0; i < c.head_dim; ++i) const_cast<float*>(n)[i] = 1.0f;
    }
  }
  EXPECT_NE(logits(*std::move(loaded)), logits(std::move(ones))) << "the q/k norms' weights change nothing";
  // What was written names the architecture, so HF transformers loads it as Qwen3.
  nlohmann::json j = nlohmann::json::parse(std::ifstream(Dir("qwen3") + "/config.json"));
  EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
}

void EditConfig(const std::string& dir, const std::string& key, const nlohmann::json& value) {
  std::ifstream in(dir + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j[key] = value;
  std::ofstream(dir + "/config.json") << j.dump();
}

TEST_F(ModelLoaderTest, BadDirectoriesAreRefusedNamingWhatIsWrong) {
  ModelWeights w = ModelWeights::Random(Small(), 11, {});
  EXPECT_TRUE(absl::IsNotFound(ModelWeights::LoadDirectory(Dir("nowhere")).status()));
  std::filesystem::create_directories(Dir("empty"));
  EXPECT_TRUE(absl::IsNotFound(ModelWeights::LoadDirectory(Dir("empty")).status()));

  ASSERT_TRUE(w.WriteDirectory(Dir("arch"), DType::kF32).ok());
  EditConfig(Dir("arch"), "architectures", {"GPT2LMHeadModel"});
  auto arch = ModelWeights::LoadDirectory(Dir("arch"));
  EXPECT_TRUE(absl::IsInvalidArgument(arch.status()));
  EXPECT_NE(arch.status().message().find("GPT2LMHeadModel"), std::string::npos) << arch.status();

  ASSERT_TRUE(w.WriteDirectory(Dir("shape"), DType::kF32).ok());
  EditConfig(Dir("shape"), "intermediate_size", 64);
  auto shape = ModelWeights::LoadDirectory(Dir("shape"));
  EXPECT_TRUE(absl::IsInvalidArgument(shape.status()));
  EXPECT_NE(shape.status().message().find("model.layers.0.mlp.gate_proj.weight has shape [48, 32]"),
            std::string::npos)
      << shape.status();

  ASSERT_TRUE(w.WriteDirectory(Dir("missing"), DType::kF32).ok());
  const int64_t h = w.config().hidden_size, v = w.config().vocab_size;
  ASSERT_TRUE(WriteSafetensors(Dir("missing") + "/model.safetensors",
                               {{"model.embed_tokens.weight", {v, h}, DType::kF32,
                                 absl::Span<const float>(w.embedding(), v * h)}})
                  .ok());
  auto missing = ModelWeights::LoadDirectory(Dir("missing"));
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
  EXPECT_NE(missing.status().message().find("model.layers.0.input_layernorm.weight is missing"), std::string::npos)
      << missing.status();

  ASSERT_TRUE(w.WriteDirectory(Dir("field"), DType::kF32).ok());
  EditConfig(Dir("field"), "num_hidden_layers", "two");
  auto field = ModelWeights::LoadDirectory(Dir("field"));
  EXPECT_TRUE(absl::IsInvalidArgument(field.status()));
  EXPECT_NE(field.status().message().find("num_hidden_layers"), std::string::npos) << field.status();

  ASSERT_TRUE(w.WriteDirectory(Dir("truncated"), DType::kF32).ok());
  std::filesystem::resize_file(Dir("truncated") + "/model.safetensors", 1000);
  auto truncated = ModelWeights::LoadDirectory(Dir("truncated"));
  EXPECT_TRUE(absl::IsInvalidArgument(truncated.status())) << truncated.status();
}

}  // namespace
}  // namespace strata::model

namespace strata::model {
namespace {

TEST(ModelConfigTest, ReadsQwen3) {
  auto c = ModelConfig::FromHfConfigJson(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 64,
      "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "intermediate_size": 48, "max_position_embeddings": 128, "attention_bias": false,
      "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "tie_word_embeddings": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->head_dim, 16) << "Qwen3's head_dim is its own, not hidden / heads";
  EXPECT_EQ(c->rope_theta, 1000000.0f);
  EXPECT_TRUE(c->tie_embeddings);
}

TEST(ModelConfigTest, ReadsRopeFromTransformers4And5Layouts) {
  const std::string base = R"("architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
      "max_position_embeddings": 128)";
  auto v4 = ModelConfig::FromHfConfigJson("{" + base + R"(, "rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}})");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->rope_theta, 500000.0f);
  EXPECT_TRUE(v4->rope_scaling.llama3);
  EXPECT_EQ(v4->rope_scaling.original_max_position, 64);
  auto v5 = ModelConfig::FromHfConfigJson("{" + base + R"(, "rope_parameters": {"rope_theta": 1000000.0,
      "rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32}})");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(v5->rope_theta, 1000000.0f);
  EXPECT_TRUE(v5->rope_scaling.llama3);
  EXPECT_EQ(v5->rope_scaling.factor, 16.0f);
  auto plain = ModelConfig::FromHfConfigJson("{" + base + R"(, "rope_parameters": {"rope_theta": 20000.0,
      "rope_type": "default"}})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->rope_theta, 20000.0f);
  EXPECT_FALSE(plain->rope_scaling.llama3);
  auto yarn = ModelConfig::FromHfConfigJson("{" + base + R"(, "rope_scaling": {"rope_type": "yarn"}})");
  EXPECT_TRUE(absl::IsInvalidArgument(yarn.status()));
  EXPECT_NE(yarn.status().message().find("yarn"), std::string::npos);
}

}  // namespace
}  // namespace strata::model
