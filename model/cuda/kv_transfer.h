// KV transfer: the checks both directions share, and saving: copies from the paged pool
// to the session store's chunk payloads in host memory (the host tier's arena,
// registered with RegisterHostMemory, or pageable memory). Loading is kv_loader.h's.
//
// A payload is laid [layer][K before RoPE | V][chunk_tokens][kv_dim] bf16
// (storage/chunk_format.h); its first `count` tokens come from `count` consecutive
// positions of a sequence. Saving gathers K before RoPE and V
// (kernels::LaunchGatherStoredKv) into device staging and copies it back in one copy; a
// payload in registered memory is gathered into directly instead, several chunks a launch
// (kernels::LaunchGatherStoredKvChunks, kv_saves.cc).
//
// One copy goes: WriteChunkIndex fills the tokens' slots and positions in pinned host
// memory; EnqueueSaveChunk puts the copies and the kernel on a stream.
// Streams: everything is enqueued on the stream given, nothing synchronises; the caller
// waits (or records an event) before it reads the payload a save wrote, reuses the
// staging buffers, or frees a payload a load reads. Ownership: the staging buffers and the
// payload are the caller's. Not thread-safe; the model's GPU must be current.
#ifndef STRATA_MODEL_CUDA_KV_TRANSFER_H_
#define STRATA_MODEL_CUDA_KV_TRANSFER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "model/cuda/kv_pool.h"
#include "model/model_config.h"
#include "storage/chunk_format.h"

namespace strata::model::cuda_internal {

// Where one chunk copy is staged.
struct ChunkStaging {
  std::byte* stored;            // device, the layout's PayloadBytes()
  std::byte* index;             // device, ChunkIndexBytes(count)
  const std::byte* host_index;  // pinned host, ChunkIndexBytes(count), from WriteChunkIndex
};

// The tokens' slots ([count] int64) and positions ([count] int32, after them).
inline int64_t ChunkIndexBytes(int count) { return 12 * int64_t{count}; }

// InvalidArgument when `s` is not a sequence of `pool` ("a sequence of another backend"),
// or when `count` tokens from `begin` do not fit `s`, `layout` does not fit `config` or
// the payload is smaller than the layout's.
absl::Status CheckChunk(const ModelConfig& config, const CudaSequence* s, const KvPool& pool, int64_t begin,
                        int count, size_t payload_bytes, const storage::ChunkLayout& layout);

// Writes the slots and positions of `count` tokens of `seq` from `begin` into
// `host_index` (ChunkIndexBytes(count) of it).
void WriteChunkIndex(const KvPool& pool, const CudaSequence& seq, int64_t begin, int count, std::byte* host_index);

// Enqueues on `stream`: the index's copy, the gather of `count` tokens' K before RoPE and
// V into staging.stored, and one copy of each (layer, K|V) block's first `count` rows into
// `payload`. (A payload in registered memory is written directly instead: kv_saves.cc.)
absl::Status EnqueueSaveChunk(const ModelConfig& config, const KvPool& pool, const ChunkStaging& staging, int count,
                              std::byte* payload, const storage::ChunkLayout& layout, cudaStream_t stream);

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_KV_TRANSFER_H_
