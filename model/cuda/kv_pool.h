// The paged KV pool in HBM and the sequences that hold its pages.
//
// Three planes, each [layers][pages * page_tokens][kv_dim] bf16 (kernels/rope/
// kv_place_params.h): K rotated (attention reads it), K before RoPE and V (what the
// session cache stores). A token's slot is its page's index times page_tokens plus its
// offset in the page; a layer's plane starts `layer_stride()` values after the previous
// one's. A CudaSequence takes the pages for its whole capacity when it is made and gives
// them back when it goes, so a running turn never runs out of KV memory.
//
// Ownership: the pool owns the planes (freed with it); a CudaSequence owns its page list
// and must not outlive the pool. Streams: Randomize and NewSequenceOn enqueue on the stream
// they are given; nothing else here touches the GPU after Allocate (the release fence,
// set by the model, may wait for the loader's streams). Not thread-safe: the
// engine loop is the only caller.
#ifndef STRATA_MODEL_CUDA_KV_POOL_H_
#define STRATA_MODEL_CUDA_KV_POOL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/attention/paged_kv.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/device_memory.h"
#include "model/model_backend.h"
#include "model/model_config.h"

namespace strata::model::cuda_internal {

class KvPool;

// A sequence's pages in the pool; gives them back when it ends. A sequence on a shared
// prefix starts its page list with the prefix's whole pages, shared_pages() of them (read,
// never written, not its own: the prefix sequence, kept alive here, owns them) and holds
// its own tokens from first() on: the prefix's length. Where that is not a multiple of
// page_tokens, its first own page starts with a copy of the prefix's last rows.
class CudaSequence final : public SequenceState {
 public:
  CudaSequence(KvPool* pool, std::vector<int32_t> pages, int64_t capacity,
               std::shared_ptr<const SequenceState> prefix = nullptr, int64_t first = 0, int shared_pages = 0)
      : pool_(pool), pages_(std::move(pages)), capacity_(capacity), prefix_(std::move(prefix)), first_(first),
        shared_pages_(shared_pages) {}
  ~CudaSequence() override;
  const std::vector<int32_t>& pages() const { return pages_; }
  // Positions it can hold: [0, capacity()), its own from first() on.
  int64_t capacity() const { return capacity_; }
  int64_t first() const { return first_; }
  bool on_prefix() const { return prefix_ != nullptr; }
  // The prefix it shares (null if none): its first shared_pages() pages are the prefix's.
  const SequenceState* prefix() const { return prefix_.get(); }
  int shared_pages() const { return shared_pages_; }
  // The pool the pages came from: a sequence of another model has another one.
  const KvPool* pool() const { return pool_; }
  // The KV loader's ticket of the last load into the sequence (0: none): a save of its
  // rows waits for that load on the device.
  uint64_t load_ticket() const { return load_ticket_; }
  void set_load_ticket(uint64_t ticket) const { load_ticket_ = ticket; }

 private:
  KvPool* pool_;
  mutable uint64_t load_ticket_ = 0;
  friend class KvPool;
  std::vector<int32_t> pages_;
  int64_t capacity_;
  std::shared_ptr<const SequenceState> prefix_;
  int64_t first_ = 0;
  int shared_pages_ = 0;  // the leading pages that are the prefix's
};

class KvPool {
 public:
  // Sizes and allocates the planes: options.kv_pool_bytes, or else
  // options.kv_memory_fraction of the GPU memory free now. ResourceExhausted when not
  // one page fits or the planes cannot be allocated.
  absl::Status Allocate(const ModelConfig& config, const CudaModelOptions& options);

  // A sequence holding the pages for `capacity_tokens` tokens. ResourceExhausted when
  // fewer pages are free.
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequence(int64_t capacity_tokens);

  // A sequence on `prefix`'s first `prefix_tokens` tokens (at most what its pages hold)
  // with pages of its own for `capacity_tokens` more. The prefix's whole pages are shared;
  // the rows of a last partial one are copied (every plane and layer) into the first own
  // page, enqueued on `stream`, which must be the stream that runs the sequence's steps.
  // ResourceExhausted when fewer pages are free.
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceOn(std::shared_ptr<const CudaSequence> prefix,
                                                               int64_t prefix_tokens, int64_t capacity_tokens,
                                                               cudaStream_t stream);

  // Gives `seq` the pages for `capacity_tokens` tokens (positions, the prefix's included):
  // takes more from the free list or returns its last ones. ResourceExhausted (nothing
  // changed) when too few are free.
  absl::Status Resize(CudaSequence& seq, int64_t capacity_tokens);

  // Called with a sequence before any of its pages go back to the free list (it ends, or
  // Resize gives pages back), while its page list is whole: returns once no KV load
  // started or queued for it can write them any more. The pages' next owner writes them on
  // the compute stream, which a load on the loader's streams is not ordered with.
  void set_release_fence(std::function<void(const CudaSequence&)> fence) { release_fence_ = std::move(fence); }

  // Enqueues on `stream` a fill of every page of every plane with random bf16 values.
  absl::Status Randomize(uint64_t seed, cudaStream_t stream);

  // Where token `pos` of `seq` lives in each layer's plane.
  int64_t Slot(const CudaSequence& s, int64_t pos) const {
    return int64_t{s.pages()[static_cast<size_t>(pos / page_tokens_)]} * page_tokens_ + pos % page_tokens_;
  }
  // Layer `l`'s rotated K and V as the attention kernels read them, over the page lists
  // in the given device index arrays.
  kernels::PagedKv LayerKv(int l, const int32_t* indptr, const int32_t* indices, const int32_t* last) const {
    return kernels::PagedKv{k_rot_.as<uint16_t>() + l * layer_stride_, v_.as<uint16_t>() + l * layer_stride_,
                            page_tokens_, num_kv_heads_, head_dim_, indptr, indices, last};
  }

  uint16_t* k_rot() const { return k_rot_.as<uint16_t>(); }
  uint16_t* k_raw() const { return k_raw_.as<uint16_t>(); }
  uint16_t* v() const { return v_.as<uint16_t>(); }
  int page_tokens() const { return page_tokens_; }
  int64_t layer_stride() const { return layer_stride_; }  // values
  int64_t pages() const { return pages_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }

 private:
  friend class CudaSequence;

  int page_tokens_ = 0, num_layers_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  DeviceBuffer k_rot_, k_raw_, v_;
  int64_t pages_ = 0;
  int64_t layer_stride_ = 0;  // values
  std::vector<int32_t> free_pages_;
  std::function<void(const CudaSequence&)> release_fence_;
};

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_KV_POOL_H_
