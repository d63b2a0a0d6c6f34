// A CUPTI kernel tracer for any CUDA process, `strata serve` included (the GPU machine has
// no Nsight Systems): loaded by the CUDA driver through CUDA_INJECTION64_PATH, it records
// every kernel's start, end, stream and grid, and appends them to the file named by
// STRATA_KERNEL_TRACE as tab-separated lines:
//   start_ns  end_ns  stream  grid_x,grid_y,grid_z  block_x  registers  name
// flushed each second (a server killed by its bench still leaves what ran before).
// tests/gpu/kernel_trace.py sums a trace by kernel and by gaps. Usage:
//   CUDA_INJECTION64_PATH=libstrata_kernel_trace.so STRATA_KERNEL_TRACE=trace.tsv strata serve ...
#include <cupti.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;

std::FILE* g_out = nullptr;
std::mutex g_out_mutex;
std::atomic<bool> g_stop{false};

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_out_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(g_out, "%llu\t%llu\t%u\t%d,%d,%d\t%d\t%u\t%s\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->streamId, k->gridX, k->gridY, k->gridZ, k->blockX,
                 static_cast<unsigned>(k->registersPerThread), k->name != nullptr ? k->name : "?");
  }
  std::fflush(g_out);
  std::free(buffer);
}

void Flusher() {
  while (!g_stop.load()) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    cuptiActivityFlushAll(0);
  }
}

void Finish() {
  g_stop = true;
  cuptiActivityFlushAll(1);
}

}  // namespace

// Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH).
extern "C" int InitializeInjection() {
  const char* path = std::getenv("STRATA_KERNEL_TRACE");
  g_out = std::fopen(path != nullptr ? path : "kernel_trace.tsv", "a");
  if (g_out == nullptr) return 0;
  if (cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI would not trace kernels\n");
    return 0;
  }
  std::thread(Flusher).detach();
  std::atexit(Finish);
  return 1;
}
