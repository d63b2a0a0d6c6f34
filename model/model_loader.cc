// ModelWeights::LoadDirectory / WriteDirectory: Hugging Face model directories.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/model_weights.h"
#include "nlohmann/json.hpp"

namespace strata::model {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexFile = "model.safetensors.index.json";

absl::StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// The HF tensor names of a Llama-family model, with where each goes and its shape.
struct Expected {
  std::string name;
  const float* dst;
  std::vector<int64_t> shape;
};

std::vector<Expected> ExpectedTensors(const ModelWeights& w) {
  const ModelConfig& c = w.config();
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size, v = c.vocab_size;
  std::vector<Expected> out;
  out.push_back({"model.embed_tokens.weight", w.embedding(), {v, h}});
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layer(l);
    const std::string p = absl::StrCat("model.layers.", l, ".");
    out.push_back({p + "input_layernorm.weight", L.attn_norm, {h}});
    out.push_back({p + "self_attn.q_proj.weight", L.wq, {q, h}});
    out.push_back({p + "self_attn.k_proj.weight", L.wk, {kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", L.wv, {kv, h}});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", L.bq, {q}});
      out.push_back({p + "self_attn.k_proj.bias", L.bk, {kv}});
      out.push_back({p + "self_attn.v_proj.bias", L.bv, {kv}});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", L.q_norm, {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", L.k_norm, {c.head_dim}});
    }
    out.push_back({p + "self_attn.o_proj.weight", L.wo, {h, q}});
    out.push_back({p + "post_attention_layernorm.weight", L.mlp_norm, {h}});
    out.push_back({p + "mlp.gate_proj.weight", L.w_gate, {f, h}});
    out.push_back({p + "mlp.up_proj.weight", L.w_up, {f, h}});
    out.push_back({p + "mlp.down_proj.weight", L.w_down, {h, f}});
  }
  out.push_back({"model.norm.weight", w.final_norm(), {h}});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", w.lm_head(), {v, h}});
  return out;
}

void Convert(const TensorView& t, float* dst) {
  const int64_t n = t.elements();
  const std::byte* src = t.bytes.data();
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        dst[i] = Bf16ToFloat(v);
      }
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        dst[i] = F16ToFloat(v);
      }
      return;
  }
}

nlohmann::json HfConfig(const ModelConfig& c) {
  nlohmann::json j = {{"architectures", {c.architecture}},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"num_hidden_layers", c.num_layers},
                      {"num_attention_heads", c.num_heads},
                      {"num_key_value_heads", c.num_kv_heads},
                      {"head_dim", c.head_dim},
                      {"intermediate_size", c.intermediate_size},
                      {"max_position_embeddings", c.max_context},
                      {"rope_theta", c.rope_theta},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"attention_bias", c.qkv_bias},
                      {"hidden_act", "silu"},
                      {"torch_dtype", "float32"}};
  if (c.rope_scaling.llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  }
  return j;
}

}  // namespace

absl::StatusOr<ModelWeights> ModelWeights::LoadDirectory(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return absl::NotFoundError(absl::StrCat("model directory ", dir, " does not exist"));
  auto config_text = ReadText(root / "config.json");
  if (!config_text.ok()) return absl::NotFoundError(absl::StrCat(dir, " has no config.json"));
  auto config = ModelConfig::FromHfConfigJson(*config_text);
  if (!config.ok()) return absl::InvalidArgumentError(absl::StrCat(dir, ": ", config.status().message()));

  // The weight files: those the index names, or every *.safetensors.
  std::vector<std::string> files;
  if (fs::exists(root / kIndexFile, ec)) {
    auto index_text = ReadText(root / kIndexFile);
    if (!index_text.ok()) return index_text.status();
    nlohmann::json index = nlohmann::json::parse(*index_text, nullptr, false);
    if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "/", kIndexFile, ": no weight_map object"));
    }
    std::set<std::string> unique;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(dir, "/", kIndexFile, ": weight_map[", name, "] is not a file"));
      }
      unique.insert(file.get<std::string>());
    }
    files.assign(unique.begin(), unique.end());
  } else {
    for (const auto& e : fs::directory_iterator(root, ec)) {
      if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) return absl::NotFoundError(absl::StrCat(dir, " holds no *.safetensors weights"));
  std::vector<std::unique_ptr<SafetensorsFile>> opened;
  std::map<std::string, const TensorView*> tensors;
  for (const std::string& name : files) {
    auto f = SafetensorsFile::Open((root / name).string());
    if (!f.ok()) return f.status();
    for (const auto& [tensor, view] : (*f)->tensors()) {
      if (!tensors.emplace(tensor, &view).second) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor ", tensor, " is stored twice"));
      }
    }
    opened.push_back(*std::move(f));
  }

  return FromTensors(*config, tensors, dir);
}

absl::StatusOr<ModelWeights> ModelWeights::FromMemory(absl::string_view config_json,
                                                      absl::Span<const std::byte> safetensors,
                                                      const std::string& name) {
  auto config = ModelConfig::FromHfConfigJson(std::string(config_json));
  if (!config.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", config.status().message()));
  auto file = SafetensorsFile::FromMemory(safetensors, name);
  if (!file.ok()) return file.status();
  std::map<std::string, const TensorView*> tensors;
  for (const auto& [tensor, view] : (*file)->tensors()) tensors.emplace(tensor, &view);
  return FromTensors(*config, tensors, name);
}

absl::StatusOr<ModelWeights> ModelWeights::FromTensors(const ModelConfig& config,
                                                       const std::map<std::string, const TensorView*>& tensors,
                                                       const std::string& where) {
  ModelWeights w(config);
  w.Layout();
  for (const Expected& e : ExpectedTensors(w)) {
    auto it = tensors.find(e.name);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": tensor ", e.name, " is missing"));
    }
    const TensorView& t = *it->second;
    if (t.shape != e.shape) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": tensor ", e.name, " has shape ", ShapeText(t.shape),
                                                     "; the config needs ", ShapeText(e.shape)));
    }
    Convert(t, const_cast<float*>(e.dst));  // this loader owns the buffer the views point into
  }
  w.ComputeFingerprint();
  return w;
}

absl::Status ModelWeights::WriteDirectory(const std::string& dir, DType dtype, int shards) const {
  if (shards < 1) return absl::InvalidArgumentError("shards must be at least 1");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  {
    std::ofstream out(fs::path(dir) / "config.json");
    out << HfConfig(config_).dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir, "/config.json"));
  }
  const std::vector<Expected> all = ExpectedTensors(*this);
  std::vector<std::vector<TensorToWrite>> per_shard(static_cast<size_t>(shards));
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < all.size(); ++i) {
    const Expected& e = all[i];
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    const size_t shard = i * static_cast<size_t>(shards) / all.size();
    per_shard[shard].push_back(TensorToWrite{e.name, e.shape, dtype, absl::Span<const float>(e.dst, n)});
    weight_map[e.name] = shards == 1 ? std::string("model.safetensors")
                                     : absl::StrCat("model-", shard + 1, "-of-", shards, ".safetensors");
  }
  for (int s = 0; s < shards; ++s) {
    const std::string name =
        shards == 1 ? std::string("model.safetensors") : absl::StrCat("model-", s + 1, "-of-", shards, ".safetensors");
    if (absl::Status st = WriteSafetensors((fs::path(dir) / name).string(), per_shard[s]); !st.ok()) return st;
  }
  if (shards > 1) {
    std::ofstream out(fs::path(dir) / kIndexFile);
    out << nlohmann::json({{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}).dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir, "/", kIndexFile));
  }
  return absl::OkStatus();
}

}  // namespace strata::model
