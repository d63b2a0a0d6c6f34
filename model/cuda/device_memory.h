// Device memory for the CUDA backend: one-owner RAII for device allocations and pinned
// host buffers, the growable workspaces built on them, a guard that drains a stream on an
// early error return, and a flat-allocation layout helper.
//
// Ownership: each buffer owns its allocation and frees it when it goes (cudaFree /
// cudaFreeHost, which wait for the device to stop using it). Reserve grows and never keeps
// the contents, so a pointer taken before a Reserve is stale after it: every move is
// counted in a caller's `generation` so that holders of captured addresses (CUDA graphs)
// know to drop them. Streams: no method here enqueues work; DrainOnError synchronises the
// stream it is given. Not thread-safe: one owner thread (the engine loop) at a time, with
// the model's GPU current.
#ifndef STRATA_MODEL_CUDA_DEVICE_MEMORY_H_
#define STRATA_MODEL_CUDA_DEVICE_MEMORY_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace strata::model::cuda_internal {

// A device allocation with one owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Free(); }

  // Frees what the buffer held and allocates `bytes` (nothing for bytes <= 0).
  // ResourceExhausted when the GPU has no room (the CUDA error is cleared); another CUDA
  // failure as CudaStatus.
  absl::Status Allocate(int64_t bytes);
  // Grows (never shrinks) to at least `bytes`; the contents are not kept. Counts a move
  // in `*generation`.
  absl::Status Reserve(int64_t bytes, int64_t* generation);
  void Free();
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  int64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Pinned host memory, grown on demand.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  // Grows (never shrinks, at least 4 KiB) to at least `bytes`; the contents are not kept.
  // Counts a move in `*generation`. A cudaMallocHost failure as CudaStatus.
  absl::Status Reserve(int64_t bytes, int64_t* generation);
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }
  int64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Waits for the model's stream when a method returns early on an error after enqueueing
// work, so nothing in flight still reads a buffer the caller frees or reuses next.
class DrainOnError {
 public:
  explicit DrainOnError(cudaStream_t stream) : stream_(stream) {}
  DrainOnError(const DrainOnError&) = delete;
  DrainOnError& operator=(const DrainOnError&) = delete;
  ~DrainOnError() {
    if (stream_ == nullptr) return;
    cudaStreamSynchronize(stream_);
    cudaGetLastError();
  }
  void Done() { stream_ = nullptr; }  // the method synchronised on its own

 private:
  cudaStream_t stream_;
};

inline int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Lays out one flat allocation: each Add returns the offset of a new region.
struct Arena {
  int64_t size = 0;
  int64_t Add(int64_t bytes) {
    const int64_t at = size;
    size = AlignUp(size + bytes, 256);
    return at;
  }
};

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_DEVICE_MEMORY_H_
