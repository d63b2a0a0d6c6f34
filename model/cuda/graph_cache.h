// Captured decode steps: one CUDA graph per step shape (batch size, context bucket, relay
// groups).
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
#include <map>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace strata::model::cuda_internal {

// What a decode step's enqueued work depends on besides the metadata's contents: the
// launches' grids and the metadata's layout (step_plan.h's Step).
struct GraphShape {
  int rows = 0;
  int64_t max_tokens = 0;
  int groups = 0, grouped_rows = 0, max_group_rows = 0;
  int64_t prefix_bucket = 0;
  int64_t typical_tokens = 0;
  auto operator<=>(const GraphShape&) const = default;
};

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

  // Runs the step of `shape` that `enqueue` puts on `stream`: eagerly
  // the first time, captured the second, replayed after. `enqueue` must not synchronise.
  // Returns enqueue's error, or a CUDA error of the capture or launch as CudaStatus; a
  // failed capture or instantiation is not an error (the step runs eagerly).
  absl::Status Run(const GraphShape& shape, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue);

  // Destroys every graph (their addresses are stale).
  void Drop();

 private:
  // Null: seen once, not captured.
  std::map<GraphShape, cudaGraphExec_t> graphs_;
  bool enabled_;
};

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_GRAPH_CACHE_H_
