// Picks and builds the model backend a server runs: the CPU reference or the CUDA GPU.
#ifndef STRATA_MODEL_BACKEND_H_
#define STRATA_MODEL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/cuda/cuda_model.h"
#include "model/model_backend.h"
#include "model/model_weights.h"

namespace strata::model {

struct BackendOptions {
  // "auto" (CUDA when strata was built with it and a GPU is there, else CPU), "cuda" or
  // "cpu".
  std::string device = "auto";
  // The CUDA backend's options (GPU, KV pool size and pages, graphs); unused on the CPU.
  CudaModelOptions cuda;

  // InvalidArgument naming the option that is out of range.
  absl::Status Validate() const;
};

// True when strata was built with CUDA and a device is visible.
bool CudaAvailable();

// Builds the backend `options.device` names over `weights`. InvalidArgument for a bad
// option or, with "cuda", a model the CUDA kernels do not take (head_dim, GQA group);
// FailedPrecondition for "cuda" without a usable GPU (or a build without CUDA), naming
// why; ResourceExhausted when the weights do not fit the GPU. "auto" falls back to the
// CPU backend, with a warning saying why, where "cuda" would fail.
absl::StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(ModelWeights weights, const BackendOptions& options);

// A backend with deterministic random weights of `config`'s shapes, made where they are
// used: on the GPU by the CUDA backend (no host copy, seconds even at 8B shapes), or on
// the host for the CPU backend (ModelWeights::Random, with `silent_tokens` as there).
// Errors and the "auto" fallback as CreateBackend.
absl::StatusOr<std::unique_ptr<ModelBackend>> CreateRandomBackend(const ModelConfig& config, uint64_t seed,
                                                                  const std::vector<int32_t>& silent_tokens,
                                                                  const BackendOptions& options);

}  // namespace strata::model

#endif  // STRATA_MODEL_BACKEND_H_
