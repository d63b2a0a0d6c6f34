// The CudaModel's saves (a finished turn's write-back to the session store's chunks) on
// the write stream: SaveKv, the tickets that say when saves completed, and the staging and
// index room they use.
//
// Two paths (kv_transfer.h): a payload in the registered host arena is written directly,
// through its device mapping, by a gather of a few blocks; its index record waits in pinned
// memory until MarkKvSaves or a wait flushes every such save so far as one copy and one
// launch (a 16K-token session is 64 chunks: one enqueue instead of 128 API calls on the
// engine thread between two steps). Any other payload is gathered into device staging and
// copied out, one chunk at a time.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/rope/rope.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/cuda_model_impl.h"
#include "model/cuda/kv_transfer.h"

namespace strata::model {

using cuda_internal::CudaSequence;
using cuda_internal::DrainOnError;

absl::Status CudaModel::Impl::ReserveSaveIndex(int64_t index_bytes, int64_t payload_bytes) {
  // The index buffers hold kMaxSaveIndexBytes from the first save on.
  if (saves_pending && (save_stored.bytes() < payload_bytes || kv_meta_used + index_bytes > kMaxSaveIndexBytes)) {
    // The staging must grow, or the indexes of saves in flight fill their room: let what
    // reads them finish first (rare: saves complete within a few steps).
    if (absl::Status s = FinishSaves(); !s.ok()) return s;
  }
  // The index room is taken whole at the first save: grown chunk by chunk, every growth
  // would wait for the saves in flight, and a long session's write-back would run on
  // the engine thread.
  const int64_t meta_bytes = std::max(kv_meta_used + index_bytes, kMaxSaveIndexBytes);
  for (absl::Status s : {save_stored.Reserve(payload_bytes, &save_generation),
                         save_host_meta.Reserve(meta_bytes, &save_generation),
                         save_meta.Reserve(meta_bytes, &save_generation)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::StageSave(const CudaSequence& seq, int64_t begin, int count, int64_t payload_bytes) {
  // Each chunk's index gets its own place, so earlier copies still in flight keep theirs.
  const int64_t index_bytes = cuda_internal::AlignUp(cuda_internal::ChunkIndexBytes(count), 16);
  if (absl::Status s = ReserveSaveIndex(index_bytes, payload_bytes); !s.ok()) return s;
  const int64_t at = kv_meta_used;  // 0 again if the reservation waited
  cuda_internal::WriteChunkIndex(pool, seq, begin, count, save_host_meta.data() + at);
  kv_meta_at = at;
  kv_meta_used = at + index_bytes;
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::QueueDirectSave(const CudaSequence& seq, int64_t begin, int count, std::byte* mapped,
                                              const storage::ChunkLayout& layout) {
  if (direct_chunks > 0 && direct_chunk_tokens != layout.chunk_tokens) {
    if (absl::Status s = FlushDirectSaves(); !s.ok()) return s;
  }
  const int64_t record_bytes = 8 * kernels::StoredChunkRecordWords(layout.chunk_tokens);
  if (direct_chunks > 0 && direct_at + (direct_chunks + 1) * record_bytes > kMaxSaveIndexBytes) {
    if (absl::Status s = FlushDirectSaves(); !s.ok()) return s;  // its records keep their room
  }
  if (direct_chunks == 0) {
    if (absl::Status s = ReserveSaveIndex(record_bytes, 0); !s.ok()) return s;
    direct_at = kv_meta_used;
    direct_chunk_tokens = layout.chunk_tokens;
  }
  auto* record = reinterpret_cast<int64_t*>(save_host_meta.data() + direct_at + direct_chunks * record_bytes);
  record[0] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(mapped));
  record[1] = count;
  for (int i = 0; i < count; ++i) record[2 + i] = pool.Slot(seq, begin + i);
  ++direct_chunks;
  kv_meta_used = direct_at + direct_chunks * record_bytes;
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::FlushDirectSaves() {
  if (direct_chunks == 0) return absl::OkStatus();
  const int chunks = direct_chunks;
  direct_chunks = 0;
  DrainOnError drain(write_stream);
  const size_t bytes = static_cast<size_t>(8 * kernels::StoredChunkRecordWords(direct_chunk_tokens) * chunks);
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(save_meta.as<std::byte>() + direct_at,
                                              save_host_meta.data() + direct_at, bytes, cudaMemcpyHostToDevice,
                                              write_stream));
  const kernels::StoredChunksParams p{chunks,
                                      config.num_layers,
                                      direct_chunk_tokens,
                                      config.num_kv_heads,
                                      config.head_dim,
                                      reinterpret_cast<const int64_t*>(save_meta.as<std::byte>() + direct_at),
                                      pool.layer_stride(),
                                      pool.k_raw(),
                                      pool.v()};
  if (absl::Status s = kernels::LaunchGatherStoredKvChunks(p, write_stream, options.kv_save_direct_blocks);
      !s.ok()) {
    return s;
  }
  drain.Done();
  return absl::OkStatus();
}

absl::Status CudaModel::Impl::FinishSaves() {
  if (!saves_pending) return absl::OkStatus();
  if (absl::Status s = UseDevice(); !s.ok()) return s;
  const absl::Status flushed = FlushDirectSaves();
  if (!flushed.ok()) lost_saves = flushed;  // the next MarkKvSaves must not call them done
  saves_pending = false;
  saves_unmarked = false;
  kv_meta_used = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(write_stream));
  for (auto& [t, e] : saves_in_flight) {
    saves_done_ticket = t;
    spare_save_events.push_back(e);
  }
  saves_in_flight.clear();
  return flushed;
}

absl::Status CudaModel::SaveKv(const SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                               const storage::ChunkLayout& layout) {
  Impl& m = *impl_;
  const auto* s = dynamic_cast<const CudaSequence*>(&seq);
  if (absl::Status st = cuda_internal::CheckChunk(m.config, s, m.pool, begin, count, payload.size(), layout);
      !st.ok()) {
    return st;
  }
  if (count == 0) return absl::OkStatus();
  if (absl::Status st = m.UseDevice(); !st.ok()) return st;
  // The rows saved may have been loaded a moment ago: then the save follows the loads.
  if (absl::StatusOr<uint64_t> started = m.StartLoads(); !started.ok()) return started.status();
  if (s->load_ticket() != 0) {
    absl::StatusOr<bool> landed = m.loader.Done(s->load_ticket());
    if (!landed.ok()) return landed.status();
    if (!*landed) STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(m.write_stream, m.loader.all_placed(), 0));
  }
  std::byte* mapped = m.options.kv_save_direct_blocks > 0 ? m.OnDevice(payload.data(), payload.size()) : nullptr;
  if (mapped != nullptr) {
    if (absl::Status st = m.QueueDirectSave(*s, begin, count, mapped, layout); !st.ok()) return st;
  } else {
    // Staged saves go out one by one, after the direct ones queued before them.
    if (absl::Status st = m.FlushDirectSaves(); !st.ok()) return st;
    if (absl::Status st = m.StageSave(*s, begin, count, layout.PayloadBytes()); !st.ok()) return st;
    DrainOnError drain(m.write_stream);
    if (absl::Status e = cuda_internal::EnqueueSaveChunk(m.config, m.pool, m.SaveStaging(), count, payload.data(),
                                                         layout, m.write_stream);
        !e.ok()) {
      m.saves_pending = false;  // drained: nothing is left in flight
      m.kv_meta_used = 0;
      return e;
    }
    drain.Done();
  }
  {
    absl::MutexLock lock(&m.stats_mu);
    m.save_bytes += static_cast<int64_t>(layout.PayloadBytes());
  }
  m.saves_pending = true;   // FinishKvTransfers waits for it
  m.saves_unmarked = true;  // no ticket covers it yet
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CudaModel::MarkKvSaves() {
  Impl& m = *impl_;
  if (!m.lost_saves.ok()) {  // saves queued since the last ticket were never enqueued
    const absl::Status lost = m.lost_saves;
    m.lost_saves = absl::OkStatus();
    return lost;
  }
  if (!m.saves_unmarked) return m.next_save_ticket - 1;  // nothing new: the last ticket covers it
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  if (absl::Status s = m.FlushDirectSaves(); !s.ok()) return s;
  cudaEvent_t e = nullptr;
  if (m.spare_save_events.empty()) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } else {
    e = m.spare_save_events.back();
    m.spare_save_events.pop_back();
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(e, m.write_stream));
  m.saves_in_flight.emplace_back(m.next_save_ticket, e);
  m.saves_unmarked = false;
  // The staging of the saves so far is the ticket's now: later saves take new index room
  // until the ticket completes. (kv_meta_used restarts once nothing is in flight.)
  return m.next_save_ticket++;
}

absl::StatusOr<bool> CudaModel::KvSavesDone(uint64_t ticket) {
  Impl& m = *impl_;
  if (ticket <= m.saves_done_ticket) return true;
  if (absl::Status s = m.UseDevice(); !s.ok()) return s;
  while (!m.saves_in_flight.empty()) {
    auto [t, e] = m.saves_in_flight.front();
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) break;
    if (q != cudaSuccess) {
      cudaGetLastError();
      return kernels::CudaStatus(q, "cudaEventQuery", __FILE__, __LINE__);
    }
    m.saves_done_ticket = t;
    m.spare_save_events.push_back(e);
    m.saves_in_flight.pop_front();
  }
  if (m.saves_in_flight.empty() && m.saves_pending && !m.saves_unmarked) {
    // Every save enqueued is covered by a completed ticket: the staging is free again.
    m.saves_pending = false;
    m.kv_meta_used = 0;
  }
  return ticket <= m.saves_done_ticket;
}

absl::Status CudaModel::FinishKvSaves() { return impl_->FinishSaves(); }

}  // namespace strata::model
