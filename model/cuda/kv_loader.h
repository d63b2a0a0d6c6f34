// KvLoader: layer-wise loading of stored KV into the paged pool (AttentionStore §3.2.1).
//
// LoadKv only queues a chunk. Start moves every queued chunk layer by layer: layer l of
// all of them goes host → the read buffer on the copy stream (one DMA per chunk, straight
// from the host tier's pinned arena), then the placement kernel (K rotated to its
// position, K and V scattered into the pool's pages) runs on the place stream and records
// layer_ready(l). A forward step's layer l waits for that event alone, so the first
// layers compute while the last ones are still on the bus.
//
// A chunk holds its layers back to back, so one DMA moves a few consecutive layers of a
// chunk (about options.copy_bytes: a copy much smaller than that pays a per-copy cost the
// bus feels: 4 MiB DMAs loaded a 16K-token Llama-3-8B history in 43.6 ms on the H100,
// 8 MiB ones in ~42; alternating them over two copy streams was slower). The rounds of
// DMAs are LoadRounds: a half round, whole rounds, then smaller ones down to one layer,
// so that the step's tail (what it computes after the last byte landed) is one layer. A
// session's last, partly filled chunk moves only its filled rows. The read buffer holds
// `buffer_layers` layers of up to `group_tokens` tokens of chunks, as slots of that many
// layers (at least two slots when it holds two layers; more chunks are moved in groups
// through the same slots): the copy into a slot waits for the placement that last read
// it, so the bus and the kernels overlap, and the buffer stays a few layers whatever the
// history's length.
//
// Streams and events: copy and place streams are the loader's own; every hand-off
// between them, and to the compute and write streams, is an event (nothing waits for a
// whole device). Ownership: the host payloads are the caller's and must stay as they are
// until Done(ticket) says so. Not thread-safe: the engine loop is the only caller, with
// the model's GPU current.
#ifndef STRATA_MODEL_CUDA_KV_LOADER_H_
#define STRATA_MODEL_CUDA_KV_LOADER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/kv_pool.h"
#include "model/model_config.h"
#include "storage/chunk_format.h"

namespace strata::model::cuda_internal {

struct KvLoaderOptions {
  int buffer_layers = 16;       // layers of a group of chunks the read buffer holds
  int64_t group_tokens = 4096;  // tokens of chunks a group holds
  int64_t copy_bytes = int64_t{8} << 20;  // about what one DMA moves (whole layers of a chunk)
  int place_priority = 0;                 // of the place stream (cudaStreamCreateWithPriority)
};

// The (first layer, layers) of each round of a load's DMAs over `layers` layers, rounds of
// at most `step` layers: a half round, whole rounds, then the last round's layers halved
// down to one (see kv_loader.cc). Every layer in exactly one round, in order.
std::vector<std::pair<int, int>> LoadRounds(int layers, int step);

class KvLoader {
 public:
  KvLoader() = default;
  KvLoader(const KvLoader&) = delete;
  KvLoader& operator=(const KvLoader&) = delete;
  ~KvLoader();

  // Creates the streams and events. InvalidArgument for options out of range.
  absl::Status Init(const ModelConfig& config, const KvLoaderOptions& options);

  // Queues `count` tokens of `seq` from `begin` from a chunk payload laid out as `layout`
  // (checked by the caller; every queued chunk has the same layout: Start the queued
  // ones before queueing one of another). Rows [first_row, first_row + count) of the chunk
  // are placed (the whole chunk still crosses the bus: its layers are one DMA).
  void Queue(const CudaSequence& seq, int64_t begin, int count, const std::byte* payload,
             const storage::ChunkLayout& layout, int first_row = 0);
  bool has_queued() const { return !queued_.empty(); }
  bool has_queued_for(const CudaSequence& seq) const;
  const storage::ChunkLayout& queued_layout() const { return layout_; }

  // Enqueues the queued chunks' moves. Nothing on other streams must come first: a load
  // reads only filled chunks (the store serves none before its fill completes) and
  // writes only pages of sequences no save reads (the engine holds a saving sequence).
  // Returns the ticket of everything started so far. On a CUDA error the loader's streams
  // are drained and the error returned (the queued chunks are dropped; what they were to
  // place is unknown).
  absl::StatusOr<uint64_t> Start(const KvPool& pool, const float* inv_freq);
  // The ticket of the last Start (0 before any).
  uint64_t last_ticket() const { return next_ticket_ - 1; }

  // Whether the moves of `ticket` and before have completed (their payloads may go).
  // A CUDA fault as its status.
  absl::StatusOr<bool> Done(uint64_t ticket);
  // Waits for everything started.
  absl::Status Finish();

  // Whether a step has yet to wait for started loads (then it runs eagerly, not as a
  // graph: the waits must be in the step's stream work).
  bool waits_pending() const { return waits_pending_; }
  // Makes `stream` wait for layer l of every load started so far; WaitedAll once the step
  // enqueued every layer's wait.
  absl::Status WaitLayer(int l, cudaStream_t stream);
  void WaitedAll() { waits_pending_ = false; }
  // Recorded on the place stream after the last Start's last layer (null before any).
  cudaEvent_t all_placed() const { return started_ ? all_placed_ : nullptr; }

  // Loads completed so far (seen by Done or Finish): rounds, bytes moved across the bus
  // (whole chunks), and their device time from the first copy to the last placement.
  // Thread-safe.
  struct Totals {
    int64_t loads = 0;
    int64_t bytes = 0;
    double seconds = 0;
  };
  Totals totals() const;

  // The streams (for tests that slow them on purpose).
  cudaStream_t copy_stream() const { return copy_; }
  cudaStream_t place_stream() const { return place_; }

 private:
  struct Chunk {
    const CudaSequence* seq;
    int64_t begin;
    int count;
    const std::byte* payload;
    int first_row;
  };
  // Layers of a chunk one DMA moves, for blocks (one layer of a chunk) of `block` bytes.
  int StepLayers(int64_t block) const;
  // Rows of chunk `c` that cross the bus: through its last placed row.
  int RowsToMove(const Chunk& c) const;
  absl::Status Reserve(int64_t slot_bytes, int slots, int64_t index_entries);

  ModelConfig config_;
  KvLoaderOptions options_;
  cudaStream_t copy_ = nullptr, place_ = nullptr;
  std::vector<cudaEvent_t> layer_ready_;              // [layers], place stream
  std::vector<cudaEvent_t> slot_filled_, slot_free_;  // [buffer_layers]
  std::vector<bool> slot_used_;
  cudaEvent_t index_copied_ = nullptr, all_placed_ = nullptr;
  bool started_ = false, waits_pending_ = false;

  std::vector<Chunk> queued_;
  storage::ChunkLayout layout_{};
  DeviceBuffer buffer_, index_;  // read buffer slots; slots and positions of the queued tokens
  PinnedBuffer host_index_;
  int64_t slot_bytes_ = 0;
  int slots_ = 0;
  int64_t generation_ = 0;  // unused: nothing captures the loader's buffers

  // A started load: its ticket, timing events around it (copy stream start, place stream
  // end) and the bytes it moves.
  struct InFlight {
    uint64_t ticket;
    cudaEvent_t begin, end;
    int64_t bytes;
  };
  // Counts a completed load into totals_.
  void Completed(const InFlight& load);

  uint64_t next_ticket_ = 1;
  std::deque<InFlight> in_flight_;  // tickets not yet seen done
  std::vector<cudaEvent_t> spare_events_;  // timing events
  uint64_t done_ticket_ = 0;
  mutable absl::Mutex totals_mu_;
  Totals totals_ ABSL_GUARDED_BY(totals_mu_);
};

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_KV_LOADER_H_
