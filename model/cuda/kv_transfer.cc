#include "model/cuda/kv_transfer.h"

#include "kernels/cuda_check.h"
#include "kernels/rope/rope.h"

namespace strata::model::cuda_internal {

absl::Status CheckChunk(const ModelConfig& c, const CudaSequence* s, const KvPool& pool, int64_t begin, int count,
                        size_t payload_bytes, const storage::ChunkLayout& layout) {
  if (s == nullptr || s->pool() != &pool) return absl::InvalidArgumentError("a sequence of another backend");
  if (layout.layers != c.num_layers || layout.row_bytes != int64_t{c.kv_dim()} * 2 || count < 0 ||
      count > layout.chunk_tokens || begin < s->first() || begin + count > s->capacity() ||
      static_cast<int64_t>(payload_bytes) < layout.PayloadBytes()) {
    return absl::InvalidArgumentError("stored KV rows do not fit this model or sequence");
  }
  return absl::OkStatus();
}

void WriteChunkIndex(const KvPool& pool, const CudaSequence& seq, int64_t begin, int count, std::byte* host_index) {
  auto* slots = reinterpret_cast<int64_t*>(host_index);
  auto* positions = reinterpret_cast<int32_t*>(host_index + 8 * int64_t{count});
  for (int i = 0; i < count; ++i) {
    positions[i] = static_cast<int32_t>(begin + i);
    slots[i] = pool.Slot(seq, begin + i);
  }
}

absl::Status EnqueueSaveChunk(const ModelConfig& c, const KvPool& pool, const ChunkStaging& staging, int count,
                              std::byte* payload, const storage::ChunkLayout& layout, cudaStream_t st) {
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(staging.index, staging.host_index, ChunkIndexBytes(count), cudaMemcpyHostToDevice, st));
  kernels::StoredKvParams p{count, c.num_layers, layout.chunk_tokens, c.num_kv_heads, c.head_dim,
                            nullptr, reinterpret_cast<const int64_t*>(staging.index), nullptr, pool.layer_stride(),
                            nullptr, pool.k_raw(), pool.v()};
  if (absl::Status e = kernels::LaunchGatherStoredKv(p, reinterpret_cast<uint16_t*>(staging.stored), st); !e.ok()) {
    return e;
  }
  const size_t pitch = static_cast<size_t>(layout.chunk_tokens * layout.row_bytes);
  if (count == layout.chunk_tokens) {
    // A full chunk is one run of bytes: one plain copy (a strided one cost the host ~20 us
    // more per chunk to enqueue on the H100 machine).
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(payload, staging.stored, pitch * 2 * static_cast<size_t>(layout.layers),
                                                cudaMemcpyDeviceToHost, st));
    return absl::OkStatus();
  }
  // One strided copy: each (layer, K|V) block's first `count` rows.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(payload, pitch, staging.stored, pitch,
                                                static_cast<size_t>(count * layout.row_bytes),
                                                static_cast<size_t>(2 * layout.layers), cudaMemcpyDeviceToHost, st));
  return absl::OkStatus();
}

}  // namespace strata::model::cuda_internal
