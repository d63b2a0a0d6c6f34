#include "model/cuda/kv_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/elementwise.h"

namespace strata::model::cuda_internal {

CudaSequence::~CudaSequence() {
  if (pool_->release_fence_ && pages_.size() > static_cast<size_t>(shared_pages_)) pool_->release_fence_(*this);
  for (size_t i = static_cast<size_t>(shared_pages_); i < pages_.size(); ++i) pool_->free_pages_.push_back(pages_[i]);
}

absl::Status KvPool::Allocate(const ModelConfig& c, const CudaModelOptions& options) {
  page_tokens_ = options.page_tokens;
  num_layers_ = c.num_layers;
  num_kv_heads_ = c.num_kv_heads;
  head_dim_ = c.head_dim;
  int64_t bytes = options.kv_pool_bytes;
  if (bytes == 0) {
    size_t free = 0, total = 0;
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
    bytes = static_cast<int64_t>(static_cast<double>(free) * options.kv_memory_fraction);
  }
  const int64_t page_bytes = int64_t{3} * c.num_layers * options.page_tokens * c.kv_dim() * 2;
  pages_ = std::min<int64_t>(bytes / page_bytes, int64_t{1} << 30);
  if (pages_ < 1) return absl::ResourceExhaustedError("no GPU memory is left for the KV pool");
  layer_stride_ = pages_ * options.page_tokens * c.kv_dim();
  for (DeviceBuffer* plane : {&k_rot_, &k_raw_, &v_}) {
    if (absl::Status s = plane->Allocate(2 * layer_stride_ * c.num_layers); !s.ok()) return s;
  }
  free_pages_.clear();
  for (int64_t p = pages_ - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SequenceState>> KvPool::NewSequence(int64_t capacity_tokens) {
  const int64_t need = (capacity_tokens + page_tokens_ - 1) / page_tokens_;
  if (need > static_cast<int64_t>(free_pages_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("the GPU KV pool has ", free_pages_.size(), " free pages of ",
                                                     pages_, "; a sequence of ", capacity_tokens, " tokens needs ",
                                                     need));
  }
  std::vector<int32_t> pages(free_pages_.end() - need, free_pages_.end());
  free_pages_.resize(free_pages_.size() - static_cast<size_t>(need));
  return std::unique_ptr<SequenceState>(std::make_unique<CudaSequence>(this, std::move(pages), capacity_tokens));
}

absl::StatusOr<std::unique_ptr<SequenceState>> KvPool::NewSequenceOn(std::shared_ptr<const CudaSequence> prefix,
                                                                     int64_t prefix_tokens, int64_t capacity_tokens,
                                                                     cudaStream_t stream) {
  const int64_t shared = prefix_tokens / page_tokens_, tail = prefix_tokens % page_tokens_;
  const int64_t need = (tail + capacity_tokens + page_tokens_ - 1) / page_tokens_;
  if (need > static_cast<int64_t>(free_pages_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("the GPU KV pool has ", free_pages_.size(), " free pages of ",
                                                     pages_, "; a sequence of ", capacity_tokens,
                                                     " tokens on a shared prefix needs ", need));
  }
  std::vector<int32_t> pages(prefix->pages().begin(), prefix->pages().begin() + shared);
  pages.insert(pages.end(), free_pages_.end() - need, free_pages_.end());
  if (tail > 0) {  // the prefix's last rows, as the sequence's first
    const int64_t row = int64_t{num_kv_heads_} * head_dim_;
    const int64_t from = int64_t{prefix->pages()[static_cast<size_t>(shared)]} * page_tokens_ * row;
    const int64_t to = int64_t{pages[static_cast<size_t>(shared)]} * page_tokens_ * row;
    for (const DeviceBuffer* plane : {&k_rot_, &k_raw_, &v_}) {
      uint16_t* base = plane->as<uint16_t>();
      const size_t pitch = static_cast<size_t>(layer_stride_) * 2;
      if (cudaError_t e = cudaMemcpy2DAsync(base + to, pitch, base + from, pitch, static_cast<size_t>(tail * row) * 2,
                                            static_cast<size_t>(num_layers_), cudaMemcpyDeviceToDevice, stream);
          e != cudaSuccess) {
        cudaGetLastError();
        return absl::InternalError(absl::StrCat("copying a shared prefix's last rows: ", cudaGetErrorString(e)));
      }
    }
  }
  free_pages_.resize(free_pages_.size() - static_cast<size_t>(need));
  return std::unique_ptr<SequenceState>(std::make_unique<CudaSequence>(
      this, std::move(pages), prefix_tokens + capacity_tokens, std::move(prefix), prefix_tokens,
      static_cast<int>(shared)));
}

absl::Status KvPool::Resize(CudaSequence& seq, int64_t capacity_tokens) {
  const int64_t need = (capacity_tokens + page_tokens_ - 1) / page_tokens_;
  int64_t have = static_cast<int64_t>(seq.pages_.size());
  if (need - have > static_cast<int64_t>(free_pages_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("the GPU KV pool has ", free_pages_.size(), " free pages of ",
                                                     pages_, "; growing a sequence to ", capacity_tokens,
                                                     " tokens needs ", need - have, " more"));
  }
  for (; have < need; ++have) {
    seq.pages_.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  if (release_fence_ && static_cast<int64_t>(seq.pages_.size()) > std::max<int64_t>(need, seq.shared_pages_)) {
    release_fence_(seq);
  }
  while (static_cast<int64_t>(seq.pages_.size()) > std::max<int64_t>(need, seq.shared_pages_)) {
    free_pages_.push_back(seq.pages_.back());
    seq.pages_.pop_back();
  }
  seq.capacity_ = capacity_tokens;
  return absl::OkStatus();
}

absl::Status KvPool::Randomize(uint64_t seed, cudaStream_t stream) {
  const int64_t n = layer_stride_ * num_layers_;
  for (DeviceBuffer* plane : {&k_rot_, &k_raw_, &v_}) {
    if (absl::Status s = kernels::LaunchFillRandomBf16({plane->as<uint16_t>(), n, ++seed, 1.0f}, stream); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::model::cuda_internal
