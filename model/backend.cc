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
  if (!(cuda.kv_memory_fraction > 0 && cuda.kv_memory_fraction <= 0.95)) {
    return absl::InvalidArgumentError("the KV memory fraction must be in (0, 0.95]");
  }
  if (cuda.kv_pool_bytes < 0 || cuda.device < 0) return absl::InvalidArgumentError("negative CUDA option");
  if (cuda.page_tokens != 16 && cuda.page_tokens != 32 && cuda.page_tokens != 64) {
    return absl::InvalidArgumentError("page_tokens must be 16, 32 or 64");
  }
  return absl::OkStatus();
}

bool CudaAvailable() { return CudaModel::DeviceCount() > 0; }

namespace {

// "auto" means the fastest backend that can run this model: when the GPU cannot, say why
// and take the CPU. Returns true when `status` is such a case.
bool FallBackToCpu(const BackendOptions& options, const absl::Status& status) {
  if (options.device != "auto" || !(absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status) ||
                                    absl::IsFailedPrecondition(status))) {
    return false;
  }
  LOG(WARNING) << "the CUDA backend cannot serve this model (" << status.message()
               << "); serving it on the CPU backend (--device=cuda would refuse)";
  return true;
}

bool WantsCuda(const BackendOptions& options) {
  if (options.device != "auto") return options.device == "cuda";
  const int gpus = CudaModel::DeviceCount();
  if (gpus == 0) {
    LOG(INFO) << "--device=auto: no CUDA device is visible (or strata was built without CUDA); serving on the CPU "
                 "backend";
  }
  return gpus > 0;
}

// "auto" names what it chose when the GPU took the model.
std::unique_ptr<ModelBackend> ChosenCuda(const BackendOptions& options, std::unique_ptr<CudaModel> model) {
  if (options.device == "auto") {
    LOG(INFO) << "--device=auto: serving on the CUDA backend (device " << options.cuda.device << " of "
              << CudaModel::DeviceCount() << " visible)";
  }
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(ModelWeights weights, const BackendOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (WantsCuda(options)) {
    auto model = CudaModel::Create(weights, options.cuda);
    if (model.ok()) return ChosenCuda(options, *std::move(model));
    if (!FallBackToCpu(options, model.status())) return model.status();
  }
  return std::unique_ptr<ModelBackend>(std::make_unique<CpuModel>(std::move(weights)));
}

absl::StatusOr<std::unique_ptr<ModelBackend>> CreateRandomBackend(const ModelConfig& config, uint64_t seed,
                                                                  const std::vector<int32_t>& silent_tokens,
                                                                  const BackendOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (WantsCuda(options)) {
    auto model = CudaModel::CreateRandom(config, seed, options.cuda);
    if (model.ok()) return ChosenCuda(options, *std::move(model));
    if (!FallBackToCpu(options, model.status())) return model.status();
  }
  return std::unique_ptr<ModelBackend>(
      std::make_unique<CpuModel>(ModelWeights::Random(config, seed, silent_tokens)));
}

}  // namespace strata::model
