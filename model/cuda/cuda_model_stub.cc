// CudaModel for a build without CUDA (CMake compiles this file instead of the CUDA
// backend's): DeviceCount is 0, Create and every method that would touch a GPU return
// FailedPrecondition.
#include "model/cuda/cuda_model.h"

namespace strata::model {

struct CudaModel::Impl {
  ModelConfig config;
};

int CudaModel::DeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const ModelWeights&, const CudaModelOptions&) {
  return absl::FailedPreconditionError("strata was built without CUDA (use --device=cpu)");
}
absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::CreateRandom(const ModelConfig&, uint64_t,
                                                                   const CudaModelOptions&) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;
const ModelConfig& CudaModel::config() const { return impl_->config; }
uint64_t CudaModel::fingerprint() const { return 0; }
int64_t CudaModel::weight_bytes() const { return 0; }
int64_t CudaModel::pool_pages() const { return 0; }
int64_t CudaModel::free_pages() const { return 0; }
int CudaModel::page_tokens() const { return 0; }
int64_t CudaModel::kv_capacity_tokens() const { return 0; }
absl::Status CudaModel::RandomizeKvPool(uint64_t) { return absl::FailedPreconditionError("no CUDA"); }
void CudaModel::set_prefill_key_splits(bool) {}
void CudaModel::set_skinny_matmul(bool) {}
void CudaModel::set_tune_matmuls(bool) {}
absl::Status CudaModel::RegisterHostMemory(absl::Span<std::byte>) { return absl::OkStatus(); }
absl::Status CudaModel::PrepareKvSaves(const storage::ChunkLayout&) { return absl::OkStatus(); }
absl::StatusOr<std::unique_ptr<SequenceState>> CudaModel::NewSequence(int64_t) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::FinishKvTransfers() { return absl::OkStatus(); }
KvTransferStats CudaModel::kv_transfer_stats() const { return {}; }
absl::Status CudaModel::FinishKvSaves() { return absl::OkStatus(); }
absl::StatusOr<uint64_t> CudaModel::MarkKvSaves() { return uint64_t{0}; }
absl::StatusOr<bool> CudaModel::KvSavesDone(uint64_t) { return true; }
absl::StatusOr<uint64_t> CudaModel::StartKvTransfers() { return uint64_t{0}; }
absl::StatusOr<bool> CudaModel::KvTransfersDone(uint64_t) { return true; }
CUstream_st* CudaModel::LoadCopyStreamForTesting() const { return nullptr; }
CUstream_st* CudaModel::LoadPlaceStreamForTesting() const { return nullptr; }
CUstream_st* CudaModel::WriteStreamForTesting() const { return nullptr; }
absl::Status CudaModel::ResizeSequence(SequenceState&, int64_t) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
bool CudaModel::shares_prefixes() const { return false; }
absl::StatusOr<std::unique_ptr<SequenceState>> CudaModel::NewSequenceOnPrefix(std::shared_ptr<const SequenceState>,
                                                                              int64_t, int64_t) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::Forward(absl::Span<const ForwardEntry>) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::LoadKv(SequenceState&, int64_t, int, absl::Span<const std::byte>,
                               const storage::ChunkLayout&) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::LoadKvRows(SequenceState&, int64_t, int, absl::Span<const std::byte>,
                                   const storage::ChunkLayout&, int) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}
absl::Status CudaModel::SaveKv(const SequenceState&, int64_t, int, absl::Span<std::byte>,
                               const storage::ChunkLayout&) {
  return absl::FailedPreconditionError("strata was built without CUDA");
}

}  // namespace strata::model
