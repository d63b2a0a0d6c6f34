#include "model/cuda/kv_loader.h"

#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/rope/rope.h"

namespace strata::model::cuda_internal {
namespace {

absl::Status NewEvent(cudaEvent_t* e) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  return absl::OkStatus();
}

absl::Status NewTimingEvent(cudaEvent_t* e) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreate(e));
  return absl::OkStatus();
}

}  // namespace

KvLoader::~KvLoader() {
  if (copy_ != nullptr) cudaStreamSynchronize(copy_);
  if (place_ != nullptr) cudaStreamSynchronize(place_);
  for (auto* events : {&layer_ready_, &slot_filled_, &slot_free_, &spare_events_}) {
    for (cudaEvent_t e : *events) cudaEventDestroy(e);
  }
  for (const InFlight& f : in_flight_) {
    cudaEventDestroy(f.begin);
    cudaEventDestroy(f.end);
  }
  for (cudaEvent_t e : {index_copied_, all_placed_}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  for (cudaStream_t s : {copy_, place_}) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
}

absl::Status KvLoader::Init(const ModelConfig& config, const KvLoaderOptions& options) {
  if (options.buffer_layers < 1 || options.buffer_layers > 64 || options.group_tokens < 1 ||
      options.copy_bytes < 1) {
    return absl::InvalidArgumentError(
        "the KV read buffer takes 1..64 layers, and a positive group of tokens and copy size");
  }
  config_ = config;
  options_ = options;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&place_, cudaStreamNonBlocking, options.place_priority));
  layer_ready_.resize(static_cast<size_t>(config.num_layers));
  slot_filled_.resize(static_cast<size_t>(options.buffer_layers));
  slot_free_.resize(static_cast<size_t>(options.buffer_layers));
  slot_used_.assign(static_cast<size_t>(options.buffer_layers), false);
  for (auto* events : {&layer_ready_, &slot_filled_, &slot_free_}) {
    for (cudaEvent_t& e : *events) {
      if (absl::Status s = NewEvent(&e); !s.ok()) return s;
    }
  }
  if (absl::Status s = NewEvent(&index_copied_); !s.ok()) return s;
  return NewEvent(&all_placed_);
}

void KvLoader::Queue(const CudaSequence& seq, int64_t begin, int count, const std::byte* payload,
                     const storage::ChunkLayout& layout, int first_row) {
  layout_ = layout;
  queued_.push_back(Chunk{&seq, begin, count, payload, first_row});
}

int KvLoader::StepLayers(int64_t block) const {
  const int64_t want = (options_.copy_bytes + block - 1) / block;
  const int most = std::min(config_.num_layers, std::max(1, options_.buffer_layers / 2));
  return static_cast<int>(std::clamp<int64_t>(want, 1, most));
}

std::vector<std::pair<int, int>> LoadRounds(int layers, int step) {
  // A half round first: layer 0's attention waits for the whole first round (a short
  // history's load is no longer than the compute, and this wait is then most of what it
  // adds). Then whole rounds, and the last round's layers halved down to one layer: the
  // layers of the last DMA are what the step still computes after the last byte landed,
  // so the tail runs one layer behind the bus, for a few smaller (slightly less
  // efficient) copies.
  std::vector<std::pair<int, int>> rounds;
  step = std::max(1, step);
  int first = 0;
  if (step > 1 && layers > step) {
    rounds.emplace_back(0, step / 2);
    first = step / 2;
  }
  while (layers - first > step) {
    rounds.emplace_back(first, step);
    first += step;
  }
  for (int left = layers - first; left > 0;) {
    const int take = left > 1 ? (left + 1) / 2 : 1;
    rounds.emplace_back(first, take);
    first += take;
    left -= take;
  }
  return rounds;
}

int KvLoader::RowsToMove(const Chunk& c) const {
  const int end = c.first_row + c.count;
  return end >= layout_.chunk_tokens ? layout_.chunk_tokens : end;
}

absl::Status KvLoader::Reserve(int64_t slot_bytes, int slots, int64_t index_entries) {
  const int64_t buffer_bytes = slot_bytes * slots;
  const int64_t index_bytes = 12 * index_entries;
  if (started_) {
    // The host index is rewritten: the last Start's copy of it must be done.
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(index_copied_));
    if (buffer_.bytes() < buffer_bytes || index_.bytes() < index_bytes || slot_bytes != slot_bytes_ ||
        slots != slots_) {
      // A device buffer moves, or slots change places: what reads them finishes first.
      if (absl::Status s = Finish(); !s.ok()) return s;
      slot_used_.assign(slot_used_.size(), false);
    }
  }
  for (absl::Status s : {buffer_.Reserve(buffer_bytes, &generation_), index_.Reserve(index_bytes, &generation_),
                         host_index_.Reserve(index_bytes, &generation_)}) {
    if (!s.ok()) return s;
  }
  slot_bytes_ = slot_bytes;
  slots_ = slots;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> KvLoader::Start(const KvPool& pool, const float* inv_freq) {
  if (queued_.empty()) return last_ticket();
  const int ct = layout_.chunk_tokens;
  const int64_t chunks = static_cast<int64_t>(queued_.size());
  const int64_t per_slot = std::clamp<int64_t>(options_.group_tokens / ct, 1, chunks);
  const int64_t groups = (chunks + per_slot - 1) / per_slot;
  const int64_t entries = chunks * ct;
  // A chunk holds its layers back to back: `step` of them go in one DMA.
  const int64_t block = 2 * int64_t{ct} * layout_.row_bytes;
  const int step = StepLayers(block);
  const int slots = std::max(1, options_.buffer_layers / step);
  if (absl::Status s = Reserve(AlignUp(per_slot * step * block, 256), slots, entries); !s.ok()) {
    queued_.clear();
    return s;
  }
  // The index: every chunk row's slot, then its position; rows not placed (before
  // first_row, or a short chunk's tail) -1.
  auto* slot_of = reinterpret_cast<int64_t*>(host_index_.data());
  auto* positions = reinterpret_cast<int32_t*>(host_index_.data() + 8 * entries);
  for (int64_t j = 0; j < chunks; ++j) {
    const Chunk& c = queued_[static_cast<size_t>(j)];
    for (int i = 0; i < ct; ++i) {
      const int token = i - c.first_row;  // of the run placed at c.begin
      const bool placed = token >= 0 && token < c.count;
      slot_of[j * ct + i] = placed ? pool.Slot(*c.seq, c.begin + token) : -1;
      positions[j * ct + i] = static_cast<int32_t>(placed ? c.begin + token : 0);
    }
  }
  const auto* d_slots = index_.as<int64_t>();
  const auto* d_positions = reinterpret_cast<const int32_t*>(index_.as<std::byte>() + 8 * entries);

  // The bytes that cross the bus: whole chunks, except a chunk whose last rows are not
  // placed (a session's last, partly filled chunk), which moves only its rows up to the
  // last placed one.
  int64_t bytes = 0;
  for (const Chunk& c : queued_) bytes += 2 * int64_t{RowsToMove(c)} * layout_.row_bytes * config_.num_layers;
  InFlight load{next_ticket_, nullptr, nullptr, bytes};
  for (cudaEvent_t* e : {&load.begin, &load.end}) {
    if (spare_events_.empty()) {
      if (absl::Status s = NewTimingEvent(e); !s.ok()) {
        queued_.clear();
        return s;
      }
    } else {
      *e = spare_events_.back();
      spare_events_.pop_back();
    }
  }
  auto enqueue = [&]() -> absl::Status {
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(load.begin, copy_));
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(index_.as<void>(), host_index_.data(), static_cast<size_t>(12 * entries),
                                                cudaMemcpyHostToDevice, place_));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(index_copied_, place_));
    int64_t k = 0;
    for (const auto& [first_layer, layers] : LoadRounds(config_.num_layers, step)) {
      for (int64_t g = 0; g < groups; ++g, ++k) {
        const size_t s = static_cast<size_t>(k % slots);
        std::byte* slot = buffer_.as<std::byte>() + static_cast<int64_t>(s) * slot_bytes_;
        const int64_t first = g * per_slot, n = std::min(per_slot, chunks - first);
        // Bus: these layers of the group's chunks into slot s, once its last reader is done.
        if (slot_used_[s]) STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_, slot_free_[s], 0));
        for (int64_t j = 0; j < n; ++j) {
          const Chunk& c = queued_[static_cast<size_t>(first + j)];
          std::byte* to = slot + j * step * block;
          const int rows = RowsToMove(c);
          if (rows == ct) {
            STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to, c.payload + layout_.RowOffset(first_layer, 0, 0),
                                                        static_cast<size_t>(layers * block), cudaMemcpyHostToDevice,
                                                        copy_));
            continue;
          }
          // A partly filled chunk: each layer's K rows and V rows that are placed, to where
          // the whole chunk's would go.
          for (int i = 0; i < layers; ++i) {
            for (int kv = 0; kv < 2; ++kv) {
              const int64_t at = layout_.RowOffset(first_layer + i, kv, 0);
              STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to + at - layout_.RowOffset(first_layer, 0, 0),
                                                          c.payload + at, static_cast<size_t>(rows * layout_.row_bytes),
                                                          cudaMemcpyHostToDevice, copy_));
            }
          }
        }
        STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot_filled_[s], copy_));
        // Kernels: each layer placed into its planes; the layer is ready after the last group.
        STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(place_, slot_filled_[s], 0));
        for (int i = 0; i < layers; ++i) {
          const int l = first_layer + i;
          const int64_t plane = l * pool.layer_stride();
          kernels::StoredKvParams p{ct, static_cast<int>(n), ct, config_.num_kv_heads, config_.head_dim,
                                    d_positions + first * ct, d_slots + first * ct, inv_freq, 0,
                                    pool.k_rot() + plane, pool.k_raw() + plane, pool.v() + plane, ct,
                                    step * block / 2};
          if (absl::Status e =
                  kernels::LaunchPlaceStoredKv(reinterpret_cast<const uint16_t*>(slot + i * block), p, place_);
              !e.ok()) {
            return e;
          }
          if (g == groups - 1) {
            STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(layer_ready_[static_cast<size_t>(l)], place_));
          }
        }
        STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot_free_[s], place_));
        slot_used_[s] = true;
      }
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(all_placed_, place_));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(load.end, place_));
    in_flight_.push_back(load);
    for (const Chunk& c : queued_) c.seq->set_load_ticket(next_ticket_);
    return absl::OkStatus();
  };
  started_ = true;
  waits_pending_ = true;
  absl::Status s = enqueue();
  queued_.clear();
  if (!s.ok()) {
    cudaStreamSynchronize(copy_);
    cudaStreamSynchronize(place_);
    cudaGetLastError();
    if (in_flight_.empty() || in_flight_.back().ticket != load.ticket) {
      spare_events_.push_back(load.begin);
      spare_events_.push_back(load.end);
    }
    return s;
  }
  return next_ticket_++;
}

bool KvLoader::has_queued_for(const CudaSequence& seq) const {
  return std::any_of(queued_.begin(), queued_.end(), [&](const Chunk& c) { return c.seq == &seq; });
}

absl::StatusOr<bool> KvLoader::Done(uint64_t ticket) {
  while (!in_flight_.empty()) {
    const InFlight load = in_flight_.front();
    const cudaError_t q = cudaEventQuery(load.end);
    if (q == cudaErrorNotReady) break;
    if (q != cudaSuccess) {
      cudaGetLastError();
      return kernels::CudaStatus(q, "cudaEventQuery", __FILE__, __LINE__);
    }
    Completed(load);
    in_flight_.pop_front();
  }
  return ticket <= done_ticket_;
}

void KvLoader::Completed(const InFlight& load) {
  float ms = 0;
  // The copy stream may have reached `begin` late (waiting for an earlier load's slots):
  // the time counted is this load's own.
  if (cudaEventElapsedTime(&ms, load.begin, load.end) != cudaSuccess) {
    cudaGetLastError();
    ms = 0;
  }
  {
    absl::MutexLock lock(&totals_mu_);
    ++totals_.loads;
    totals_.bytes += load.bytes;
    totals_.seconds += ms / 1000.0;
  }
  done_ticket_ = load.ticket;
  spare_events_.push_back(load.begin);
  spare_events_.push_back(load.end);
}

KvLoader::Totals KvLoader::totals() const {
  absl::MutexLock lock(&totals_mu_);
  return totals_;
}

absl::Status KvLoader::Finish() {
  if (copy_ == nullptr) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(place_));
  for (const InFlight& load : in_flight_) Completed(load);
  in_flight_.clear();
  return absl::OkStatus();
}

absl::Status KvLoader::WaitLayer(int l, cudaStream_t stream) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, layer_ready_[static_cast<size_t>(l)], 0));
  return absl::OkStatus();
}

}  // namespace strata::model::cuda_internal
