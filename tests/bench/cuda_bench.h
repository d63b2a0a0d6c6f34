// Helpers shared by the GPU benchmarks: a fatal check of CUDA calls (a benchmark has
// nothing to recover), device copies of host vectors, event-timed medians, and the clock
// and median of work timed from the host (a model's whole step).
#ifndef STRATA_TESTS_BENCH_CUDA_BENCH_H_
#define STRATA_TESTS_BENCH_CUDA_BENCH_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "kernels/attention/paged_kv.h"

#define CHECK_CUDA(call)                                                                                  \
  do {                                                                                                    \
    cudaError_t e = (call);                                                                               \
    if (e != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

namespace strata::bench {

// Seconds on the steady clock, for work timed from the host.
inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median of `v` (the upper middle of an even count); v is not empty.
template <typename T>
T Median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A device copy of `v` (cudaMalloc'd; the benchmark frees it or lets the process end).
template <typename T>
T* Upload(const std::vector<T>& v) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, v.size()) * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Median milliseconds of `reps` runs of fn on `stream`, timed with events after three
// warm-up runs; flush() runs before each timed run, outside the timing (e.g. to evict L2).
template <typename Fn, typename Flush>
float MedianMs(cudaStream_t stream, int reps, Fn fn, Flush flush) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms;
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    flush();
    CHECK_CUDA(cudaEventRecord(a, stream));
    fn();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return Median(std::move(ms));
}

template <typename Fn>
float MedianMs(cudaStream_t stream, int reps, Fn fn) {
  return MedianMs(stream, reps, fn, [] {});
}

// Reads `bytes` of `buffer` (a multiple of 16) on `stream` and writes nothing: see
// cuda_bench_flush.cu. `sink` is one device float the kernel may write.
cudaError_t ReadFlushAsync(const void* buffer, size_t bytes, float* sink, cudaStream_t stream);

// A kernel that does nothing, in `blocks` blocks of `threads` with `smem_bytes` of dynamic
// shared memory (cuda_bench_flush.cu): what a launch of that shape costs by itself.
cudaError_t EmptyKernelAsync(int blocks, int threads, int smem_bytes, cudaStream_t stream);

// Reads every K and V row of `batch` sequences (at most max_tokens each) in a paged pool the
// way the decode kernels do, per (KV head, sequence, part), and computes nothing:
// cuda_bench_paged_read.cu. The decode benchmark's peer for reading the same rows the same
// way, not only the same bytes (not a bound: a kernel's own split can beat its simple one).
cudaError_t PagedReadAsync(const kernels::PagedKv& kv, int batch, int64_t max_tokens, float* sink,
                           cudaStream_t stream);

// Two plain reads of the same rows into registers (cuda_bench_paged_read.cu as well): the decode's
// order (one warp per KV head, sequence and part, its head's rows) or, with whole_tokens,
// each page's K and V whole by one block per sequence and part.
cudaError_t PagedReadFormAsync(const kernels::PagedKv& kv, int batch, int64_t max_tokens, bool whole_tokens,
                               float* sink, cudaStream_t stream);

// The memory benchmarks' peer, on `stream`: an L2 flush (reading 256 MB evicts the 50 MB
// L2; since 2026-11-26 it reads instead of writing, so the timed work does not pay the
// write-back of the flush's dirty lines, which no kernel of a decode step leaves behind)
// and the device-to-device copy rate of a size up to 1 GiB, in bytes read + written per
// second (median of 20 copies, L2 flushed before each).
class CopyCeiling {
 public:
  explicit CopyCeiling(cudaStream_t stream) : stream_(stream) {
    CHECK_CUDA(cudaMalloc(&flush_, kFlushBytes));
    CHECK_CUDA(cudaMemset(flush_, 0, kFlushBytes));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&sink_), sizeof(float)));
    CHECK_CUDA(cudaMalloc(&src_, kMaxBytes));
    CHECK_CUDA(cudaMalloc(&dst_, kMaxBytes));
    CHECK_CUDA(cudaMemset(src_, 1, kMaxBytes));
  }
  CopyCeiling(const CopyCeiling&) = delete;
  CopyCeiling& operator=(const CopyCeiling&) = delete;
  ~CopyCeiling() {
    for (void* p : {flush_, src_, dst_, static_cast<void*>(sink_)}) cudaFree(p);
  }
  void Flush() { CHECK_CUDA(ReadFlushAsync(flush_, kFlushBytes, sink_, stream_)); }
  double Gbps(size_t bytes = kMaxBytes) {
    bytes = std::min(bytes, kMaxBytes);
    const float ms = MedianMs(
        stream_, 20, [&] { CHECK_CUDA(cudaMemcpyAsync(dst_, src_, bytes, cudaMemcpyDeviceToDevice, stream_)); },
        [&] { Flush(); });
    return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  }

 private:
  static constexpr size_t kFlushBytes = size_t{256} << 20, kMaxBytes = size_t{1} << 30;
  cudaStream_t stream_;
  void *flush_ = nullptr, *src_ = nullptr, *dst_ = nullptr;
  float* sink_ = nullptr;
};

}  // namespace strata::bench

#endif  // STRATA_TESTS_BENCH_CUDA_BENCH_H_
