#include "text/tokenizer_loader.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "text/sentencepiece_model.h"
#include "text/sentencepiece_tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata::text {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// End-of-turn markers of the supported families' templates.
constexpr const char* kTurnEnds[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|eom_id|>"};

absl::StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A JSON file of the directory, or an empty object when it is absent.
absl::StatusOr<Json> ReadJsonIfPresent(const fs::path& path) {
  if (!fs::exists(path)) return Json::object();
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadText(path));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " is not a JSON object"));
  }
  return j;
}

// "<s>", or {"content": "<s>", ...} (older configs), or null.
std::string TokenText(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return "";
}

void AddIds(const Json& config, std::set<int32_t>& ids) {
  auto it = config.find("eos_token_id");
  if (it == config.end()) return;
  if (it->is_number_integer()) ids.insert(it->get<int32_t>());
  if (it->is_array()) {
    for (const Json& e : *it) if (e.is_number_integer()) ids.insert(e.get<int32_t>());
  }
}

class ModelDirTokenizer final : public Tokenizer {
 public:
  ModelDirTokenizer(std::unique_ptr<TokenVocabulary> vocab, std::unique_ptr<ChatTemplate> chat, ChatTemplateVars vars,
                    std::set<int32_t> stops)
      : vocab_(std::move(vocab)), chat_(std::move(chat)), vars_(std::move(vars)), stops_(std::move(stops)) {}

  int vocab_size() const override { return vocab_->vocab_size(); }

  absl::StatusOr<std::vector<int32_t>> RenderChat(absl::Span<const ChatMessage> messages) const override {
    if (chat_ == nullptr) {
      return absl::InvalidArgumentError(
          "this model directory has no chat_template in tokenizer_config.json: send the prompt as token_ids");
    }
    if (messages.empty()) return absl::InvalidArgumentError("the conversation has no messages");
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string& role = messages[i].role;
      if (role != "system" && role != "user" && role != "assistant") {
        return absl::InvalidArgumentError(absl::StrCat("message ", i, " has unknown role '", role,
                                                       "' (expected system, user or assistant)"));
      }
      if (!IsValidUtf8(messages[i].content)) {
        return absl::InvalidArgumentError(absl::StrCat("message ", i, " content is not valid UTF-8"));
      }
    }
    STRATA_ASSIGN_OR_RETURN(std::string text, chat_->Render(messages, vars_));
    return vocab_->Encode(text);
  }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override { return vocab_->Encode(text); }
  std::string_view TokenBytes(int32_t token) const override { return vocab_->TokenBytes(token); }
  bool DropsLeadingSpace() const override { return vocab_->drops_leading_space(); }
  bool IsStopToken(int32_t token) const override { return stops_.contains(token); }

  // Special tokens other than the stop tokens: a random-weight model should not emit them.
  std::vector<int32_t> SilentTokens() const override {
    std::vector<int32_t> silent;
    for (int32_t t = 0; t < vocab_->vocab_size(); ++t) {
      if (vocab_->IsSpecial(t) && !stops_.contains(t)) silent.push_back(t);
    }
    return silent;
  }

 private:
  std::unique_ptr<TokenVocabulary> vocab_;
  std::unique_ptr<ChatTemplate> chat_;  // null: no chat_template
  ChatTemplateVars vars_;
  std::set<int32_t> stops_;
};

std::string Family(std::string_view source) {
  if (source.find("<|start_header_id|>") != std::string_view::npos) return "Llama 3";
  if (source.find("<|im_start|>") != std::string_view::npos) return "ChatML (Qwen2)";
  if (source.find("[INST]") != std::string_view::npos) return "Mistral / Llama 2 [INST]";
  return "unrecognised family (rendered as written)";
}

// tokenizer_config.json's options for a tokenizer.model: legacy, add_prefix_space and
// added_tokens_decoder ({"32000": {"content": "<pad>", "special": true, ...}, ...}).
absl::StatusOr<SentencePieceOptions> SentencePieceOptionsOf(const Json& config, const fs::path& path) {
  SentencePieceOptions options;
  if (auto it = config.find("legacy"); it != config.end() && it->is_boolean()) options.legacy = it->get<bool>();
  if (auto it = config.find("add_prefix_space"); it != config.end() && it->is_boolean()) {
    options.add_prefix_space = it->get<bool>();
  }
  auto added = config.find("added_tokens_decoder");
  if (added == config.end() || added->is_null()) return options;
  if (!added->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": added_tokens_decoder is not an object"));
  }
  for (const auto& [key, token] : added->items()) {
    char* end = nullptr;
    const long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX || !token.is_object() || !token.contains("content") ||
        !token["content"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.string(), ": added_tokens_decoder entry '", key, "' is not an ID with a content"));
    }
    SentencePieceAddedToken a;
    a.id = static_cast<int32_t>(id);
    a.content = token["content"].get<std::string>();
    a.special = token.value("special", false);
    options.added_tokens.push_back(std::move(a));
  }
  return options;
}

}  // namespace

bool HasTokenizerFile(const std::string& dir) {
  const fs::path root(dir);
  return fs::exists(root / "tokenizer.json") ||
         (fs::exists(root / "tokenizer.model") && SentencePieceModel::Available());
}

std::string MissingTokenizerReason(const std::string& dir) {
  const fs::path root(dir);
  if (std::string why; fs::exists(root / "tokenizer.model") && !SentencePieceModel::Available(&why)) {
    return absl::StrCat(dir, "/tokenizer.model is not read: ", why);
  }
  return absl::StrCat(dir, " has no tokenizer.json or tokenizer.model");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir, std::string* note) {
  const fs::path root(dir);
  STRATA_ASSIGN_OR_RETURN(const Json tokenizer_config, ReadJsonIfPresent(root / "tokenizer_config.json"));
  STRATA_ASSIGN_OR_RETURN(Json config, ReadJsonIfPresent(root / "config.json"));
  STRATA_ASSIGN_OR_RETURN(Json generation_config, ReadJsonIfPresent(root / "generation_config.json"));

  ChatTemplateVars vars;
  vars.bos_token = TokenText(tokenizer_config, "bos_token");
  vars.eos_token = TokenText(tokenizer_config, "eos_token");
  std::unique_ptr<TokenVocabulary> vocab;
  std::string file;
  if (fs::exists(root / "tokenizer.json")) {
    file = "tokenizer.json";
    STRATA_ASSIGN_OR_RETURN(std::string json, ReadText(root / file));
    auto bpe = BpeTokenizer::FromJson(json);
    if (!bpe.ok()) return absl::InvalidArgumentError(absl::StrCat(dir, ": ", bpe.status().message()));
    vocab = *std::move(bpe);
  } else if (fs::exists(root / "tokenizer.model")) {
    file = "tokenizer.model";
    STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadText(root / file));
    STRATA_ASSIGN_OR_RETURN(SentencePieceOptions options,
                            SentencePieceOptionsOf(tokenizer_config, root / "tokenizer_config.json"));
    auto spm = SentencePieceTokenizer::FromModel(bytes, options);
    if (!spm.ok()) {
      return absl::Status(spm.status().code(), absl::StrCat((root / file).string(), ": ", spm.status().message()));
    }
    // LlamaTokenizer's defaults are the model's own <s> and </s>.
    if (vars.bos_token.empty()) vars.bos_token = (*spm)->bos_piece();
    if (vars.eos_token.empty()) vars.eos_token = (*spm)->eos_piece();
    vocab = *std::move(spm);
  } else {
    return absl::NotFoundError(MissingTokenizerReason(dir));
  }

  std::set<int32_t> stops;
  AddIds(config, stops);
  AddIds(generation_config, stops);
  if (auto id = vocab->TokenId(vars.eos_token); id.has_value() && !vars.eos_token.empty()) stops.insert(*id);

  std::unique_ptr<ChatTemplate> chat;
  std::string family = "none: token_ids only";
  const Json* source = tokenizer_config.contains("chat_template") ? &tokenizer_config["chat_template"] : nullptr;
  if (source != nullptr && source->is_array()) {
    // A list of named templates: the "default" one serves chat.
    for (const Json& t : *source) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template")) source = &t["template"];
    }
  }
  if (source != nullptr && source->is_string()) {
    const std::string text = source->get<std::string>();
    auto parsed = ChatTemplate::Parse(text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "/tokenizer_config.json: the chat template is not supported (",
                                                     parsed.status().message(), ")"));
    }
    // Render probes now, so that a construct the interpreter lacks fails at start, not on
    // a user's turn. raise_exception is the template's own refusal and is fine here.
    for (const std::vector<ChatMessage>& probe :
         {std::vector<ChatMessage>{{"user", "hi"}},
          std::vector<ChatMessage>{{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "v"}}}) {
      auto rendered = (*parsed)->Render(probe, vars);
      if (!rendered.ok() && rendered.status().message().find(" raised: ") == std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, "/tokenizer_config.json: the chat template is not supported (", rendered.status().message(), ")"));
      }
    }
    for (const char* end : kTurnEnds) {
      auto id = vocab->TokenId(end);
      if (id.has_value() && vocab->IsSpecial(*id) && text.find(end) != std::string::npos) stops.insert(*id);
    }
    family = Family(text);
    chat = *std::move(parsed);
  } else if (source != nullptr && !source->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/tokenizer_config.json: chat_template is neither a string "
                                                        "nor a list with a \"default\" template"));
  }
  if (stops.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": no stop token (no eos_token_id in config.json or "
                                                        "generation_config.json, no eos_token in tokenizer_config.json)"));
  }
  if (note != nullptr) {
    *note = absl::StrCat(file, ": vocabulary ", vocab->vocab_size(), ", chat template: ", family,
                         ", stop tokens {", absl::StrJoin(stops, ", "), "}");
  }
  return std::make_unique<ModelDirTokenizer>(std::move(vocab), std::move(chat), std::move(vars), std::move(stops));
}

}  // namespace strata::text
