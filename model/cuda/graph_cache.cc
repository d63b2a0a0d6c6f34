#include "model/cuda/graph_cache.h"

#include "base/log.h"
#include "kernels/cuda_check.h"

namespace strata::model::cuda_internal {

absl::Status GraphCache::Run(const GraphShape& key, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    // Each graph holds a few hundred nodes: past kMaxGraphs shapes, start the cache over.
    if (graphs_.size() >= kMaxGraphs) Drop();
    graphs_.emplace(key, nullptr);  // seen once: eager this time
    return enqueue();
  }
  if (it->second == nullptr) {
    cudaGraph_t graph = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    absl::Status enqueued = enqueue();
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    if (enqueued.ok() && ended == cudaSuccess) {
      if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = nullptr;
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (exec == nullptr) {
      cudaGetLastError();
      enabled_ = false;
      LOG(WARNING) << "CUDA graph capture failed (" << (enqueued.ok() ? cudaGetErrorString(ended) : enqueued.message())
                   << "); decode steps run without graphs";
      return enqueue();
    }
    it->second = exec;
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream));
  return absl::OkStatus();
}

void GraphCache::Drop() {
  for (auto& [key, exec] : graphs_) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
  graphs_.clear();
}

}  // namespace strata::model::cuda_internal
