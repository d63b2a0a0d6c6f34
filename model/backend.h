// Picks and builds the model backend a server runs: the CPU reference or the CUDA GPU.
#ifndef STRATA_MODEL_BACKEND_H_
#define STRATA_MODEL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/model_backend.h"
#include "model/model_weights.h"

namespace strata::model {

struct BackendOptions {
  // "auto" (CUDA when strata was built with it and a GPU is there, else CPU), "cuda" or
  // "cpu".
  std::string device = "auto";
  // CUDA: the GPU to use, and how much of its free memory (after the weights) the paged
  // KV pool takes; 0 < fraction <= 0.95.
  int cuda_device = 0;
  double kv_memory_fraction = 0.85;
  // CUDA: an explicit pool size in bytes instead (0: use the fraction).
  int64_t kv_pool_bytes = 0;
  int page_tokens = 32;  // tokens per page of the pool

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

}  // namespace strata::model

#endif  // STRATA_MODEL_BACKEND_H_
