// kv_load_bench: moving a session's KV between the host tier and the GPU pool, against a
// plain cudaMemcpyAsync of the same bytes in the same run.
//   - LoadKv: chunk payloads (pre-RoPE K and V, bf16, layer-major) moved to the GPU layer
//     by layer through the read buffer (kv_loader.h), K rotated to its positions and K and
//     V scattered into the paged pool, from the first LoadKv to FinishKvTransfers;
//   - SaveKv: the pre-RoPE K and V rows gathered from the pool and copied back;
// each from ordinary (pageable) memory and from memory registered with the CUDA backend
// (what the server does with the host tier's arena). The peer: cudaMemcpyAsync of the
// same bytes between pinned memory and the device, one call per chunk, waited once.
// Llama-3-8B KV shapes (32 layers, 8 KV heads of 128), chunks of 256 tokens (32 MiB), 64
// chunks (a 16K-token session, 2 GiB).
//
//   kv_load_bench [--quick]        (without a GPU it says so and exits 0)
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "model/cuda/cuda_model.h"

namespace strata::model {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Host memory of `bytes`, touched (so page faults are not timed).
std::byte* HostBuffer(int64_t bytes) {
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, 0x3c, static_cast<size_t>(bytes));
  return static_cast<std::byte*>(p);
}

int Run(bool quick) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 1024;  // the KV's shape is all that matters here
  c.hidden_size = 4096;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 256;
  c.max_context = 32768;
  CudaModelOptions o;
  o.kv_pool_bytes = int64_t{6} << 30;
  o.initial_step_tokens = 64;
  auto made = CudaModel::CreateRandom(c, 1, o);
  if (!made.ok()) {
    std::printf("kv_load_bench: %s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  CudaModel& m = **made;
  const int chunk_tokens = 256, chunks = quick ? 4 : 64, reps = quick ? 2 : 5;
  const storage::ChunkLayout layout = ChunkLayoutFor(m, chunk_tokens);
  const int64_t payload = layout.PayloadBytes(), total = payload * chunks;
  std::printf("chunk: %d tokens, %.1f MiB; session: %d chunks, %.0f MiB\n", chunk_tokens, payload / 1048576.0, chunks,
              total / 1048576.0);

  // The plain copy: pinned host memory to the device and back, the same bytes, one call
  // per chunk, waited for once.
  void *pinned = nullptr, *device = nullptr;
  cudaMallocHost(&pinned, static_cast<size_t>(total));
  cudaMalloc(&device, static_cast<size_t>(total));
  std::memset(pinned, 0x3c, static_cast<size_t>(total));
  auto copy_time = [&](cudaMemcpyKind kind) {
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      const double t0 = Now();
      for (int i = 0; i < chunks; ++i) {
        auto* h = static_cast<std::byte*>(pinned) + i * payload;
        auto* d = static_cast<std::byte*>(device) + i * payload;
        cudaMemcpyAsync(kind == cudaMemcpyHostToDevice ? static_cast<void*>(d) : h,
                        kind == cudaMemcpyHostToDevice ? static_cast<void*>(h) : d, static_cast<size_t>(payload), kind,
                        nullptr);
      }
      cudaStreamSynchronize(nullptr);
      if (r > 0) t.push_back(Now() - t0);
    }
    return Median(t);
  };
  const double h2d = copy_time(cudaMemcpyHostToDevice), d2h = copy_time(cudaMemcpyDeviceToHost);

  auto seq = *m.NewSequence(int64_t{chunks} * chunk_tokens);
  auto kv_time = [&](std::byte* host, bool load) {
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      const double t0 = Now();
      for (int i = 0; i < chunks; ++i) {
        absl::Span<std::byte> p(host + i * payload, static_cast<size_t>(payload));
        absl::Status s = load ? m.LoadKv(*seq, int64_t{i} * chunk_tokens, chunk_tokens, p, layout)
                              : m.SaveKv(*seq, int64_t{i} * chunk_tokens, chunk_tokens, p, layout);
        if (!s.ok()) {
          std::printf("%s: %s\n", load ? "LoadKv" : "SaveKv", std::string(s.message()).c_str());
          return -1.0;
        }
      }
      if (absl::Status s = load ? m.FinishKvTransfers() : m.FinishKvSaves(); !s.ok()) {
        std::printf("waiting for the transfers: %s\n", std::string(s.message()).c_str());
        return -1.0;
      }
      if (r > 0) t.push_back(Now() - t0);
    }
    return Median(t);
  };
  std::byte* pageable = HostBuffer(total);
  std::byte* arena = HostBuffer(total);
  if (pageable == nullptr || arena == nullptr) return 1;
  const double load_pageable = kv_time(pageable, true), save_pageable = kv_time(pageable, false);
  if (absl::Status s = m.RegisterHostMemory(absl::Span<std::byte>(arena, static_cast<size_t>(total))); !s.ok()) {
    std::printf("RegisterHostMemory: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double load_pinned = kv_time(arena, true), save_pinned = kv_time(arena, false);

  auto gbs = [&](double t) { return total / t / 1e9; };
  std::printf("%-40s %10s %10s %12s\n", "", "ms", "GB/s", "vs memcpy");
  std::printf("%-40s %10.2f %10.1f %12s\n", "cudaMemcpyAsync H2D (pinned)", h2d * 1e3, gbs(h2d), "1.00");
  std::printf("%-40s %10.2f %10.1f %12.2f\n", "LoadKv from the registered arena", load_pinned * 1e3, gbs(load_pinned),
              h2d / load_pinned);
  std::printf("%-40s %10.2f %10.1f %12.2f\n", "LoadKv from pageable memory", load_pageable * 1e3, gbs(load_pageable),
              h2d / load_pageable);
  std::printf("%-40s %10.2f %10.1f %12s\n", "cudaMemcpyAsync D2H (pinned)", d2h * 1e3, gbs(d2h), "1.00");
  std::printf("%-40s %10.2f %10.1f %12.2f\n", "SaveKv to the registered arena", save_pinned * 1e3, gbs(save_pinned),
              d2h / save_pinned);
  std::printf("%-40s %10.2f %10.1f %12.2f\n", "SaveKv to pageable memory", save_pageable * 1e3, gbs(save_pageable),
              d2h / save_pageable);
  return 0;
}

}  // namespace
}  // namespace strata::model

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (strata::model::CudaModel::DeviceCount() == 0) {
    std::printf("kv_load_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  return strata::model::Run(quick);
}
