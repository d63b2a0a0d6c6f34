// CudaModel's state: the parts below composed on the model's one stream. Internal to
// model/cuda/ (cuda_model.cc holds the CudaModel methods, layer_loop.cc the forward pass).
//
// Every piece of work is enqueued on `stream` (non-blocking, made with the model), so work
// runs in the order it was enqueued; Forward and RandomizeKvPool synchronise it once before
// they return. LoadKv and SaveKv only enqueue, each chunk's index at its own offset of the
// staging buffers (the stored-KV staging is reused in stream order), and
// FinishKvTransfers synchronises them all at once (Forward does so first). The step workspaces and the staging buffers
// (meta, host_meta, stored) are shared by steps and KV copies; any that moves bumps
// `generation`, and the graph cache is dropped. Not thread-safe: the engine loop is the
// only caller.
#ifndef STRATA_MODEL_CUDA_CUDA_MODEL_IMPL_H_
#define STRATA_MODEL_CUDA_CUDA_MODEL_IMPL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/device_weights.h"
#include "model/cuda/graph_cache.h"
#include "model/cuda/kv_pool.h"
#include "model/cuda/kv_transfer.h"
#include "model/cuda/step_plan.h"

namespace strata::model {

struct CudaModel::Impl {
  ModelConfig config;
  uint64_t fingerprint = 0;
  CudaModelOptions options;
  cudaStream_t stream = nullptr;

  cuda_internal::DeviceWeights weights;
  cuda_internal::KvPool pool;

  // Step workspaces.
  cuda_internal::DeviceBuffer x, proj, hb, qkv, q, attn, ab, gu, act, logits, lb, attn_ws, meta, stored, argmax_dev;
  cuda_internal::PinnedBuffer host_meta, argmax_host;
  int64_t generation = 0;  // bumped whenever a buffer above moves
  // KV transfers enqueued since the last FinishKvTransfers, and the bytes of meta /
  // host_meta their chunk indexes take.
  bool kv_pending = false;
  int64_t kv_meta_used = 0;

  cuda_internal::GraphCache graphs;

  void* registered = nullptr;  // host memory pinned by RegisterHostMemory

  ~Impl() {
    if (registered != nullptr) cudaHostUnregister(registered);
    graphs.Drop();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Enqueues one step's work on the stream: the metadata copy, the layers, the greedy
  // tokens' copy back to argmax_host. Nothing in it synchronises, so it can be captured.
  // (layer_loop.cc)
  absl::Status Enqueue(const cuda_internal::Step& step);

  int qkv_width() const { return config.q_dim() + 2 * config.kv_dim(); }
  // Makes the model's GPU current on the calling thread (the engine loop is not the
  // thread that created the model).
  absl::Status UseDevice() const;

  // A model of `config` on options.device with its weight storage laid out (not filled).
  static absl::StatusOr<std::unique_ptr<Impl>> Make(const ModelConfig& config, const CudaModelOptions& options,
                                                    uint64_t fingerprint);
  absl::Status Init(int device);
  absl::Status AllocatePool();
  // Grows the step workspaces for `rows` rows, `logit_rows` sampled rows and `decodes`
  // decode rows over at most `max_tokens` tokens.
  absl::Status ReserveStep(int64_t rows, int64_t logit_rows, int64_t decodes, int64_t max_tokens);
  // For moving `count` tokens of `seq` from `begin` between a chunk payload of
  // `payload_bytes` and the pool: makes the GPU current, grows the staging buffers and
  // writes the tokens' slots ([count] int64, at host_meta) and positions ([count] int32,
  // after them) for one copy to `meta`.
  absl::Status StageChunk(const cuda_internal::CudaSequence& seq, int64_t begin, int count, int64_t payload_bytes);
  // The staging StageChunk prepared, for kv_transfer.h.
  cuda_internal::ChunkStaging Staging() const {
    return {stored.as<std::byte>(), meta.as<std::byte>() + kv_meta_at, host_meta.data() + kv_meta_at};
  }
  int64_t kv_meta_at = 0;  // offset of the chunk StageChunk prepared last
  // Checks and stages one chunk of `seq`, then runs `enqueue` (its copies and kernel) on
  // the stream; on an error the stream is drained. LoadKv and SaveKv.
  absl::Status TransferChunk(const SequenceState& seq, int64_t begin, int count, size_t payload_bytes,
                             const storage::ChunkLayout& layout,
                             const std::function<absl::Status(cudaStream_t)>& enqueue);
  // Waits for the KV transfers enqueued so far (no-op without any).
  absl::Status FinishKvTransfers();
};

}  // namespace strata::model

#endif  // STRATA_MODEL_CUDA_CUDA_MODEL_IMPL_H_
