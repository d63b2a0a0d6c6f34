#include "model/model_config.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace strata::model {

absl::Status ModelConfig::Validate() const {
  auto bad = [](const char* field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("model config: ", field, " ", why));
  };
  if (architecture != "LlamaForCausalLM" && architecture != "MistralForCausalLM" &&
      architecture != "Qwen2ForCausalLM" && architecture != "Qwen3ForCausalLM") {
    return bad("architectures", absl::StrCat("'", architecture,
                                             "' is not supported (LlamaForCausalLM, MistralForCausalLM, "
                                             "Qwen2ForCausalLM, Qwen3ForCausalLM are)"));
  }
  if (vocab_size <= 0) return bad("vocab_size", "must be positive");
  if (hidden_size <= 0) return bad("hidden_size", "must be positive");
  if (num_layers <= 0) return bad("num_hidden_layers", "must be positive");
  if (num_heads <= 0) return bad("num_attention_heads", "must be positive");
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) {
    return bad("num_key_value_heads", absl::StrCat("must divide num_attention_heads (", num_heads, ")"));
  }
  if (head_dim <= 0 || head_dim % 2 != 0) return bad("head_dim", "must be positive and even");
  if (intermediate_size <= 0) return bad("intermediate_size", "must be positive");
  if (max_context <= 1) return bad("max_position_embeddings", "must be > 1");
  if (!(rope_theta > 0)) return bad("rope_theta", "must be positive");
  if (!(rms_norm_eps > 0)) return bad("rms_norm_eps", "must be positive");
  return absl::OkStatus();
}

std::string ModelConfig::CanonicalString() const {
  return absl::StrCat(architecture, ";vocab=", vocab_size, ";hidden=", hidden_size,
                      ";layers=", num_layers, ";heads=", num_heads, ";kv_heads=", num_kv_heads,
                      ";head_dim=", head_dim, ";ffn=", intermediate_size, ";ctx=", max_context,
                      ";theta=", rope_theta, ";llama3=", rope_scaling.llama3, ",",
                      rope_scaling.factor, ",", rope_scaling.low_freq_factor, ",",
                      rope_scaling.high_freq_factor, ",", rope_scaling.original_max_position,
                      ";eps=", rms_norm_eps, ";tie=", tie_embeddings, ";qkv_bias=", qkv_bias,
                      qk_norm ? ";qk_norm=1" : "");
}

absl::Status ModelConfig::CheckTokens(absl::Span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " (", tokens[i], ") is outside the vocabulary of ", vocab_size));
    }
  }
  return absl::OkStatus();
}

ModelConfig ModelConfig::Builtin() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 264;  // 256 bytes + 6 special tokens, padded to a multiple of 8
  c.hidden_size = 256;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 704;
  c.max_context = 8192;
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-5f;
  c.tie_embeddings = false;
  c.qkv_bias = false;
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::Named(const std::string& name) {
  if (name == "builtin") return Builtin();
  if (name == "qwen3-8b") {  // Qwen3-8B: q/k norms, GQA 32:8, head_dim 128
    ModelConfig c;
    c.architecture = "Qwen3ForCausalLM";
    c.vocab_size = 151936;
    c.max_context = 40960;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    c.eos_token_ids = {151645};
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.hidden_size = 4096;
    c.num_layers = 36;
    c.head_dim = 128;
    c.intermediate_size = 12288;
    c.qk_norm = true;
    return c;
  }
  if (name == "qwen2.5-7b") {  // Qwen2.5-7B: GQA 28:4 (7 query heads per KV head), QKV bias
    ModelConfig c;
    c.architecture = "Qwen2ForCausalLM";
    c.vocab_size = 152064;
    c.max_context = 32768;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    c.eos_token_ids = {151645};
    c.num_heads = 28;
    c.num_kv_heads = 4;
    c.hidden_size = 3584;
    c.num_layers = 28;
    c.head_dim = 128;
    c.intermediate_size = 18944;
    c.qkv_bias = true;
    return c;
  }
  if (name != "llama3-8b" && name != "llama3-1b") {
    return absl::InvalidArgumentError(absl::StrCat("unknown model shape '", name,
                                                   "' (known: builtin, llama3-8b, llama3-1b, qwen3-8b, qwen2.5-7b)"));
  }
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 128256;
  c.max_context = 131072;
  c.rope_theta = 500000.0f;
  c.rope_scaling = kernels::RopeScaling{.llama3 = true};
  c.eos_token_ids = {128001, 128008, 128009};
  c.num_heads = 32;
  c.num_kv_heads = 8;
  if (name == "llama3-8b") {
    c.hidden_size = 4096;
    c.num_layers = 32;
    c.head_dim = 128;
    c.intermediate_size = 14336;
  } else {
    c.hidden_size = 2048;
    c.num_layers = 16;
    c.head_dim = 64;
    c.intermediate_size = 8192;
    c.tie_embeddings = true;
  }
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::FromHfConfigJson(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  ModelConfig c;
  auto get_int = [&](const char* key, int* out, bool required) -> absl::Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      return required ? absl::InvalidArgumentError(absl::StrCat("config.json: missing ", key))
                      : absl::OkStatus();
    }
    if (!it->is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, " must be an integer"));
    }
    *out = it->get<int>();
    return absl::OkStatus();
  };
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() &&
                                        (*a)[0].is_string()) {
    c.architecture = (*a)[0].get<std::string>();
  }
  for (auto [key, out, required] :
       {std::tuple{"vocab_size", &c.vocab_size, true}, {"hidden_size", &c.hidden_size, true},
        {"num_hidden_layers", &c.num_layers, true}, {"num_attention_heads", &c.num_heads, true},
        {"intermediate_size", &c.intermediate_size, true},
        {"max_position_embeddings", &c.max_context, true}}) {
    if (absl::Status s = get_int(key, out, required); !s.ok()) return s;
  }
  c.num_kv_heads = c.num_heads;
  if (absl::Status s = get_int("num_key_value_heads", &c.num_kv_heads, false); !s.ok()) return s;
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  if (absl::Status s = get_int("head_dim", &c.head_dim, false); !s.ok()) return s;
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6f);
  if (auto eos = j.find("eos_token_id"); eos != j.end()) {
    if (eos->is_number_integer()) c.eos_token_ids.push_back(eos->get<int32_t>());
    if (eos->is_array()) {
      for (const auto& e : *eos) {
        if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int32_t>());
      }
    }
  }
  c.tie_embeddings = j.value("tie_word_embeddings", false);
  c.qkv_bias = j.value("attention_bias", c.architecture == "Qwen2ForCausalLM");
  c.qk_norm = c.architecture == "Qwen3ForCausalLM";
  // RoPE: transformers < 5 writes rope_theta and rope_scaling at the top level;
  // transformers 5 writes both into rope_parameters.
  c.rope_theta = j.value("rope_theta", 10000.0f);
  const nlohmann::json* scaling = nullptr;
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    c.rope_theta = rp->value("rope_theta", c.rope_theta);
    scaling = &*rp;
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && rs->is_object()) scaling = &*rs;
  if (scaling != nullptr) {
    const nlohmann::json& rs = *scaling;
    std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
    if (type == "llama3") {
      c.rope_scaling.llama3 = true;
      c.rope_scaling.factor = rs.value("factor", 8.0f);
      c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0f);
      c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0f);
      c.rope_scaling.original_max_position = rs.value("original_max_position_embeddings", 8192);
    } else if (type != "default") {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: rope type '", type, "' is not supported (default and llama3 are)"));
    }
  }
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  return c;
}

}  // namespace strata::model
