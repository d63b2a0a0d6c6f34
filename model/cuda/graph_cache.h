// Captured decode steps: one CUDA graph per step shape (batch size, context bucket).
//
// The first step of a shape runs eagerly (cuBLAS picks and sets up its kernels), the
// second captures it, later ones replay it. Launching ~11 kernels a layer one by one
// leaves the GPU idle between them; a graph launch does not. A capture that fails turns
// graphs off for good, with one log line. Past kMaxGraphs shapes the cache starts over.
//
// A graph holds the device addresses its capture saw: whoever moves a buffer a step reads
// or writes must Drop the cache. Ownership: the cache owns its graph executables (destroyed
// by Drop and with the cache). Streams: Run captures and launches on the stream it is
// given (capture mode thread-local). Not thread-safe: the engine loop is the only caller.
#ifndef STRATA_MODEL_CUDA_GRAPH_CACHE_H_
#define STRATA_MODEL_CUDA_GRAPH_CACHE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace strata::model::cuda_internal {

class GraphCache {
 public:
  static constexpr size_t kMaxGraphs = 256;

  explicit GraphCache(bool enabled = true) : enabled_(enabled) {}
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache() { Drop(); }

  // Whether steps may run as graphs: set at construction, off after a failed capture.
  bool enabled() const { return enabled_; }
  void set_enabled(bool enabled) { enabled_ = enabled; }

  // Runs the step of shape (`rows`, `max_tokens`) that `enqueue` puts on `stream`: eagerly
  // the first time, captured the second, replayed after. `enqueue` must not synchronise.
  // Returns enqueue's error, or a CUDA error of the capture or launch as CudaStatus; a
  // failed capture or instantiation is not an error (the step runs eagerly).
  absl::Status Run(int rows, int64_t max_tokens, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue);

  // Destroys every graph (their addresses are stale).
  void Drop();

 private:
  // By (rows << 32 | context bucket); null: seen once, not captured.
  std::unordered_map<uint64_t, cudaGraphExec_t> graphs_;
  bool enabled_;
};

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_GRAPH_CACHE_H_
