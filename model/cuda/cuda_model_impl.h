// CudaModel's state: the parts below composed on the model's streams. Internal to
// model/cuda/ (cuda_model.cc holds the CudaModel methods, layer_loop.cc the forward pass).
//
// Streams: `stream` computes steps (Forward and RandomizeKvPool synchronise it before
// they return); the loader's copy and place streams bring stored KV in layer by layer
// (kv_loader.h); `write_stream` gathers and copies KV out to chunk payloads (SaveKv).
// `stream` and the place stream have the device's greatest priority, `write_stream` its
// least, so a write-back's kernels yield the SMs to the steps.
// Every hand-off is an event: a step's layer l waits for the loads' layer l; a save waits
// for the loads into its sequence still in flight; the engine hears that saves completed
// from events polled by ticket (MarkKvSaves / KvSavesDone), and keeps their sequences
// untouched until then, so neither steps nor loads wait for saves. Saves stage through
// their own buffers (save_stored, save_meta, save_host_meta), so steps never wait for
// transfers on the host. Steps' workspaces: any that moves bumps `generation`, and the
// graph cache is dropped. Not thread-safe: the engine loop is the only caller.
#ifndef STRATA_MODEL_CUDA_CUDA_MODEL_IMPL_H_
#define STRATA_MODEL_CUDA_CUDA_MODEL_IMPL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/attention/prefill.h"
#include "kernels/attention/relay.h"
#include "model/cuda/cuda_model.h"
#include "kernels/gemm/gemm.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/device_weights.h"
#include "model/cuda/graph_cache.h"
#include "model/cuda/kv_loader.h"
#include "model/cuda/kv_pool.h"
#include "model/cuda/kv_transfer.h"
#include "model/cuda/step_plan.h"

namespace strata::model {

struct CudaModel::Impl {
  ModelConfig config;
  uint64_t fingerprint = 0;
  CudaModelOptions options;
  cudaStream_t stream = nullptr;        // compute
  cudaStream_t write_stream = nullptr;  // saves (HBM -> host)
  // Relay attention's system part beside the decode (kernels/attention/relay.h): a stream
  // of `stream`'s priority, forked from and joined back to it inside each layer, its two
  // events, and the rows' own tokens from which it is taken; all null (one stream) unless
  // options.relay_beside_min_tokens asks for it.
  kernels::RelaySide relay_side;

  cuda_internal::DeviceWeights weights;
  cuda_internal::KvPool pool;

  // Step workspaces.
  cuda_internal::DeviceBuffer x, proj, hb, qkv, q, attn, ab, gu, act, logits, lb, attn_ws, meta, argmax_dev;
  cuda_internal::PinnedBuffer host_meta, argmax_host;
  int64_t generation = 0;  // bumped whenever a buffer above moves

  // Loads (after the pool: it goes first, with its streams drained).
  cuda_internal::KvLoader loader;
  // Saves: staging, and the bytes of save_meta / save_host_meta the chunk indexes of the
  // saves since the last FinishKvTransfers take.
  cuda_internal::DeviceBuffer save_stored, save_meta;
  cuda_internal::PinnedBuffer save_host_meta;
  int64_t save_generation = 0;  // nothing captures the save staging
  bool saves_pending = false;   // saves enqueued whose staging is not yet known free
  bool saves_unmarked = false;  // saves enqueued since the last MarkKvSaves
  int64_t kv_meta_used = 0;
  static constexpr int64_t kMaxSaveIndexBytes = int64_t{8} << 20;
  // Save tickets: an event recorded on write_stream per MarkKvSaves, oldest first.
  std::deque<std::pair<uint64_t, cudaEvent_t>> saves_in_flight;
  std::vector<cudaEvent_t> spare_save_events;
  uint64_t next_save_ticket = 1, saves_done_ticket = 0;

  cuda_internal::GraphCache graphs;

  // A step that waits for loads records a timing event on `stream` before and after each
  // layer's wait ([2 * layer], [2 * layer + 1]); the gaps are the time it stalled.
  std::vector<cudaEvent_t> stall_events;
  // Added up after each such step, and the bytes saves copied (kv_transfer_stats).
  mutable absl::Mutex stats_mu;
  double load_stall_seconds ABSL_GUARDED_BY(stats_mu) = 0;
  int64_t save_bytes ABSL_GUARDED_BY(stats_mu) = 0;

  void* registered = nullptr;  // host memory pinned by RegisterHostMemory
  int64_t registered_bytes = 0;
  std::byte* registered_on_device = nullptr;  // its device mapping (null: none)
  // Where `bytes` at `host` lie in the registered memory's device mapping; null outside it.
  std::byte* OnDevice(const std::byte* host, size_t bytes) const {
    const auto* base = static_cast<const std::byte*>(registered);
    if (registered_on_device == nullptr || host < base || host + bytes > base + registered_bytes) return nullptr;
    return registered_on_device + (host - base);
  }

  ~Impl() {
    // Nothing may still read the host memory about to be unpinned, or the pool.
    pool.set_release_fence(nullptr);  // the loader goes first
    (void)loader.Finish();
    if (write_stream != nullptr) cudaStreamSynchronize(write_stream);
    if (registered != nullptr) cudaHostUnregister(registered);
    graphs.Drop();
    for (auto& [t, e] : saves_in_flight) cudaEventDestroy(e);
    for (cudaEvent_t e : spare_save_events) cudaEventDestroy(e);
    for (cudaEvent_t e : stall_events) cudaEventDestroy(e);
    for (cudaEvent_t e : {relay_side.fork, relay_side.join}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    for (cudaStream_t s : {stream, write_stream, relay_side.stream}) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }

  // Enqueues one step's work on the stream: the metadata copy, the layers, the greedy
  // tokens' copy back to argmax_host. Nothing in it synchronises, so it can be captured;
  // with `wait_loads` each layer first waits for the started loads' layer (such a step
  // runs eagerly). (layer_loop.cc)
  absl::Status Enqueue(const cuda_internal::Step& step, bool wait_loads);

  int qkv_width() const { return config.q_dim() + 2 * config.kv_dim(); }
  // The prompt chunks of `step` as the prefill's split along the keys sees them.
  kernels::PrefillSplitShape PrefillShape(const cuda_internal::Step& step) const {
    return {step.n_seq - step.decodes, step.rows - step.decodes, step.max_new,
            config.num_heads,          config.num_kv_heads,      config.head_dim, step.max_prompt_keys};
  }
  // Whether `step`'s prefill splits its keys (workspace in attn_ws).
  bool SplitsPrefill(const cuda_internal::Step& step) const {
    return options.prefill_key_splits && step.decodes < step.n_seq && kernels::PrefillKeySplits(PrefillShape(step)) > 1;
  }
  // The events a step that waits for loads records around its waits (created once).
  absl::Status ReserveStallEvents();
  // After such a step completed: adds the time its layers waited to load_stall_seconds.
  void CountStall();
  // Makes the model's GPU current on the calling thread (the engine loop is not the
  // thread that created the model).
  absl::Status UseDevice() const;

  // A model of `config` on options.device with its weight storage laid out (not filled).
  static absl::StatusOr<std::unique_ptr<Impl>> Make(const ModelConfig& config, const CudaModelOptions& options,
                                                    uint64_t fingerprint);
  absl::Status Init(int device);
  absl::Status AllocatePool();
  // The rows a step's products run for: a decode step of more than kSkinnyMatMulMaxRows
  // sequences with tuned products, rounded up to a multiple of 8 (the tuned row counts);
  // else `rows` (CudaModelOptions::tuned_decode_rows).
  int64_t ProductRows(int64_t rows, bool decode_only) const {
    if (!options.tune_matmuls || !decode_only || rows <= kernels::kSkinnyMatMulMaxRows) return rows;
    return (rows + 7) / 8 * 8;
  }
  // Which kernel a step's product of an in x out weight takes: steps of up to 16 rows
  // that are each a sequence's one new token (decode steps, or a prompt chunk of one
  // token) take the skinny kernel for weights large enough to gain from it
  // (CudaModelOptions::skinny_matmul), and so does the LM head of any step; longer prompt
  // chunks go through cuBLAS.
  kernels::MatMulPath ProductPath(bool decode, int64_t in, int64_t out) const {
    return options.skinny_matmul && decode && 2 * in * out >= options.skinny_min_weight_bytes
               ? kernels::MatMulPath::kAuto
               : kernels::MatMulPath::kCublas;
  }
  // Tunes the decode steps' cuBLAS products (those the skinny kernel does not take) for
  // every row count ProductRows gives up to options.tuned_decode_rows (layer 0's weights
  // stand for every layer's: the same shapes), before the pool takes the memory. Waits
  // for the stream.
  absl::Status TuneDecodeProducts();
  // Grows the step workspaces for `rows` rows, `logit_rows` sampled rows and `decodes`
  // decode rows over at most `max_tokens` tokens (and the relay groups and the prefill's
  // split along the keys of `relay_step`).
  absl::Status ReserveStep(int64_t rows, int64_t logit_rows, int64_t decodes, int64_t max_tokens,
                           const cuda_internal::Step* relay_step = nullptr);
  // For saving `count` tokens of `seq` from `begin` to a chunk payload of
  // `payload_bytes`: grows the save staging and writes the tokens' slots ([count] int64,
  // at save_host_meta) and positions ([count] int32, after them) for one copy to save_meta.
  absl::Status StageSave(const cuda_internal::CudaSequence& seq, int64_t begin, int count, int64_t payload_bytes);
  // Makes room for `index_bytes` more of save index after kv_meta_used (and save staging
  // of payload_bytes), waiting for the saves in flight where theirs fill it.
  absl::Status ReserveSaveIndex(int64_t index_bytes, int64_t payload_bytes);
  // For saving `count` tokens of `seq` from `begin` straight into a registered payload
  // whose device mapping is `mapped`: adds the chunk's record (kernels::StoredChunksParams)
  // to the direct saves FlushDirectSaves launches.
  absl::Status QueueDirectSave(const cuda_internal::CudaSequence& seq, int64_t begin, int count, std::byte* mapped,
                               const storage::ChunkLayout& layout);
  // Enqueues the direct saves queued so far on write_stream: one copy of their records,
  // one gather of kv_save_direct_blocks blocks. (kv_saves.cc)
  absl::Status FlushDirectSaves();
  int64_t direct_at = 0;        // the queued direct saves' records: offset in save_host_meta,
  int direct_chunks = 0;        // how many,
  int direct_chunk_tokens = 0;  // and their chunks' tokens
  // A flush that failed inside a wait: the saves it held never ran, which the next
  // MarkKvSaves reports instead of a ticket.
  absl::Status lost_saves;
  // The staging StageSave prepared, for kv_transfer.h.
  cuda_internal::ChunkStaging SaveStaging() const {
    return {save_stored.as<std::byte>(), save_meta.as<std::byte>() + kv_meta_at,
            save_host_meta.data() + kv_meta_at};
  }
  int64_t kv_meta_at = 0;  // offset of the chunk StageSave prepared last
  // Starts the queued loads; their ticket.
  absl::StatusOr<uint64_t> StartLoads();
  // The pool's release fence (KvPool::set_release_fence): returns once no load queued or
  // started writes `seq`'s pages (its queued chunks are started, then waited for with
  // everything started before them, on the host: a sequence ends with a load in flight only
  // where a turn ends before a step read it, or a step failed).
  void FenceLoadsInto(const cuda_internal::CudaSequence& seq);
  // Waits for the KV transfers started or enqueued so far.
  absl::Status FinishKvTransfers();
  // Waits for the saves enqueued so far (every save ticket completes).
  absl::Status FinishSaves();
};

}  // namespace strata::model

#endif  // STRATA_MODEL_CUDA_CUDA_MODEL_IMPL_H_
