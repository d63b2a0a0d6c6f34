// The model a server runs and the tokenizer that goes with it, chosen from one name: the
// built-in model, random weights of a named shape, or a Hugging Face model directory.
// This is the one place that puts model/ and text/ together for serving.
#ifndef STRATA_ENGINE_SERVED_MODEL_H_
#define STRATA_ENGINE_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/backend.h"
#include "model/model_backend.h"
#include "text/tokenizer.h"

namespace strata::engine {

struct ServedModelOptions {
  // "" (the built-in model: trained weights linked into the binary, byte tokenizer;
  // model/builtin/builtin_model.h), "random:NAME" (deterministic random weights of
  // ModelConfig::Named(NAME); token IDs only, except random:builtin: the byte tokenizer
  // on random weights of ModelConfig::Builtin(), smaller and faster, for tests), or a
  // directory with config.json + *.safetensors (+ tokenizer.json).
  std::string model;
  uint64_t seed = 20241122;  // seed of random weights
  model::BackendOptions backend;
};

struct ServedModel {
  std::unique_ptr<model::ModelBackend> backend;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::string description;  // what was loaded, for the log
};

// Loads (or makes) the model and its tokenizer and builds the backend. InvalidArgument for
// an unknown random:NAME (naming the known ones) or a broken model directory (naming the
// file, tensor or field); NotFound for a directory that does not exist; the backend's
// errors as model::CreateBackend says. A directory without tokenizer.json serves token
// IDs only (said in the log).
absl::StatusOr<ServedModel> LoadServedModel(const ServedModelOptions& options);

}  // namespace strata::engine

#endif  // STRATA_ENGINE_SERVED_MODEL_H_
