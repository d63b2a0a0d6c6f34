#include "engine/served_model.h"

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "model/builtin/builtin_model.h"
#include "model/model_weights.h"
#include "text/tokenizer_loader.h"

namespace strata::engine {
namespace {

constexpr absl::string_view kRandomPrefix = "random:";

absl::StatusOr<ServedModel> LoadRandom(const std::string& name, const ServedModelOptions& options) {
  auto config = model::ModelConfig::Named(name);
  if (!config.ok()) return config.status();
  ServedModel served;
  absl::StatusOr<std::unique_ptr<model::ModelBackend>> backend;
  if (name == "builtin") {
    // The same host weights on every backend, so the built-in model answers alike on each.
    auto bytes = std::make_unique<text::ByteTokenizer>();
    backend = model::CreateBackend(model::ModelWeights::Random(*config, options.seed, bytes->SilentTokens()),
                                   options.backend);
    served.tokenizer = std::move(bytes);
  } else {
    backend = model::CreateRandomBackend(*config, options.seed, {}, options.backend);
    served.tokenizer = std::make_unique<text::TokenIdsOnlyTokenizer>(config->vocab_size, config->eos_token_ids);
  }
  if (!backend.ok()) return backend.status();
  served.backend = *std::move(backend);
  served.description = absl::StrCat("random weights of ", name, " shapes (seed ", options.seed, ")",
                                    name == "builtin" ? "" : "; Chat takes token_ids only");
  return served;
}

absl::StatusOr<ServedModel> LoadDirectory(const std::string& dir, const ServedModelOptions& options) {
  auto weights = model::ModelWeights::LoadDirectory(dir);
  if (!weights.ok()) return weights.status();
  const model::ModelConfig& c = weights->config();
  ServedModel served;
  served.description = absl::StrCat(dir, ": ", c.architecture, ", ", c.num_layers, " layers, hidden ", c.hidden_size,
                                    ", ", weights->parameter_count(), " parameters");
  if (text::HasTokenizerFile(dir)) {
    std::string note;
    auto loaded = text::LoadTokenizer(dir, &note);
    if (!loaded.ok()) return loaded.status();
    LOG(INFO) << note;
    served.tokenizer = *std::move(loaded);
  } else {
    LOG(WARNING) << text::MissingTokenizerReason(dir) << ": Chat takes token_ids only (messages are refused)";
    served.tokenizer = std::make_unique<text::TokenIdsOnlyTokenizer>(c.vocab_size, c.eos_token_ids);
  }
  auto backend = model::CreateBackend(*std::move(weights), options.backend);
  if (!backend.ok()) return backend.status();
  served.backend = *std::move(backend);
  return served;
}

// The trained built-in model (model/builtin/builtin_model.h) with the byte tokenizer and
// chat template it was trained on.
absl::StatusOr<ServedModel> LoadBuiltin(const ServedModelOptions& options) {
  auto weights = model::BuiltinWeights();
  if (!weights.ok()) return weights.status();
  ServedModel served;
  const model::ModelConfig& c = weights->config();
  served.description = absl::StrCat("the built-in model (trained on the King James Bible: ", c.num_layers,
                                    " layers, hidden ", c.hidden_size, ", ", weights->parameter_count(),
                                    " parameters; --model=random:builtin for the random one)");
  served.tokenizer = std::make_unique<text::ByteTokenizer>();
  auto backend = model::CreateBackend(*std::move(weights), options.backend);
  if (!backend.ok()) return backend.status();
  served.backend = *std::move(backend);
  return served;
}

}  // namespace

absl::StatusOr<ServedModel> LoadServedModel(const ServedModelOptions& options) {
  if (options.model.empty()) return LoadBuiltin(options);
  if (absl::StartsWith(options.model, kRandomPrefix)) {
    return LoadRandom(options.model.substr(kRandomPrefix.size()), options);
  }
  return LoadDirectory(options.model, options);
}

}  // namespace strata::engine
