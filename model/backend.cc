#include "model/backend.h"

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "model/cpu/cpu_model.h"
#include "model/cuda/cuda_model.h"

namespace strata::model {

absl::Status BackendOptions::Validate() const {
  if (device != "auto" && device != "cuda" && device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device must be auto, cuda or cpu, got '", device, "'"));
  }
  if (!(kv_memory_fraction > 0 && kv_memory_fraction <= 0.95)) {
    return absl::InvalidArgumentError("the KV memory fraction must be in (0, 0.95]");
  }
  if (kv_pool_bytes < 0 || cuda_device < 0) return absl::InvalidArgumentError("negative CUDA option");
  if (page_tokens != 16 && page_tokens != 32 && page_tokens != 64) {
    return absl::InvalidArgumentError("page_tokens must be 16, 32 or 64");
  }
  return absl::OkStatus();
}

bool CudaAvailable() { return CudaModel::DeviceCount() > 0; }

absl::StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(ModelWeights weights, const BackendOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const bool cuda = options.device == "cuda" || (options.device == "auto" && CudaAvailable());
  if (!cuda) return std::unique_ptr<ModelBackend>(std::make_unique<CpuModel>(std::move(weights)));
  CudaModelOptions co;
  co.device = options.cuda_device;
  co.kv_memory_fraction = options.kv_memory_fraction;
  co.kv_pool_bytes = options.kv_pool_bytes;
  co.page_tokens = options.page_tokens;
  auto model = CudaModel::Create(weights, co);
  if (model.ok()) return std::unique_ptr<ModelBackend>(*std::move(model));
  if (options.device == "auto" && (absl::IsInvalidArgument(model.status()) ||
                                   absl::IsResourceExhausted(model.status()) ||
                                   absl::IsFailedPrecondition(model.status()))) {
    // "auto" means the fastest backend that can run this model: say why it is not the GPU.
    LOG(WARNING) << "the CUDA backend cannot serve this model (" << model.status().message()
                 << "); serving it on the CPU backend (--device=cuda would refuse)";
    return std::unique_ptr<ModelBackend>(std::make_unique<CpuModel>(std::move(weights)));
  }
  return model.status();
}

}  // namespace strata::model
