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
// --writeback: decode steps of 32 sessions at 1K context on Llama-3-8B (random weights)
// while a 16K-token session's KV goes to the registered host arena on the write stream
// (SaveKv of 64 chunks, MarkKvSaves, polled with KvSavesDone as the engine does), against
// the same steps with nothing copied, and against the old synchronous save (the step
// after a save that waited for its copies on the host). The first step beside it is also
// shown with the enqueue's host time added: the engine enqueues between two steps. Both
// save paths in one run: gathered into device staging and copied out, and the gather
// writing the registered host memory directly (CudaModelOptions::kv_save_direct_blocks) with
// 8, 12, 16 and 24 blocks.
//
//   kv_load_bench [--quick] [--writeback]   (without a GPU it says so and exits 0)
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "model/cuda/cuda_model.h"
#include "tests/bench/cuda_bench.h"

namespace strata::model {
namespace {

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
      const double t0 = bench::NowSeconds();
      for (int i = 0; i < chunks; ++i) {
        auto* h = static_cast<std::byte*>(pinned) + i * payload;
        auto* d = static_cast<std::byte*>(device) + i * payload;
        cudaMemcpyAsync(kind == cudaMemcpyHostToDevice ? static_cast<void*>(d) : h,
                        kind == cudaMemcpyHostToDevice ? static_cast<void*>(h) : d, static_cast<size_t>(payload), kind,
                        nullptr);
      }
      cudaStreamSynchronize(nullptr);
      if (r > 0) t.push_back(bench::NowSeconds() - t0);
    }
    return bench::Median(t);
  };
  const double h2d = copy_time(cudaMemcpyHostToDevice), d2h = copy_time(cudaMemcpyDeviceToHost);

  auto seq = *m.NewSequence(int64_t{chunks} * chunk_tokens);
  auto kv_time = [&](std::byte* host, bool load) {
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      const double t0 = bench::NowSeconds();
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
      if (r > 0) t.push_back(bench::NowSeconds() - t0);
    }
    return bench::Median(t);
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

  // The loader's DMA size (--cuda_kv_read_copy_bytes), each on a model of its own over the
  // same registered arena, with a read buffer of the same bytes.
  seq.reset();
  made->reset();  // unregisters the arena
  std::printf("\nLoadKv from the registered arena by DMA size (vs the memcpy above)\n");
  std::printf("%-40s %10s %10s %12s\n", "", "ms", "GB/s", "vs memcpy");
  for (const int64_t mib : {4, 8, 16}) {
    {
      CudaModelOptions vo = o;
      vo.kv_read_copy_bytes = mib << 20;
      vo.kv_read_buffer_layers = static_cast<int>(std::max<int64_t>(8, 2 * mib));  // two slots of whole DMAs
      vo.kv_read_group_tokens = 8192 * 4 / std::max<int64_t>(4, mib);              // the same buffer bytes
      auto variant = CudaModel::CreateRandom(c, 1, vo);
      if (!variant.ok()) {
        std::printf("variant: %s\n", std::string(variant.status().message()).c_str());
        return 1;
      }
      if (absl::Status s =
              (*variant)->RegisterHostMemory(absl::Span<std::byte>(arena, static_cast<size_t>(total)));
          !s.ok()) {
        std::printf("RegisterHostMemory: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      CudaModel& vm = **variant;
      auto vseq = *vm.NewSequence(int64_t{chunks} * chunk_tokens);
      std::vector<double> t;
      for (int r = 0; r < reps + 1; ++r) {
        const double t0 = bench::NowSeconds();
        for (int i = 0; i < chunks; ++i) {
          absl::Span<std::byte> p(arena + i * payload, static_cast<size_t>(payload));
          if (absl::Status s = vm.LoadKv(*vseq, int64_t{i} * chunk_tokens, chunk_tokens, p, layout); !s.ok()) {
            std::printf("LoadKv: %s\n", std::string(s.message()).c_str());
            return 1;
          }
        }
        if (absl::Status s = vm.FinishKvTransfers(); !s.ok()) return 1;
        if (r > 0) t.push_back(bench::NowSeconds() - t0);
      }
      const double v = bench::Median(t);
      char label[64];
      std::snprintf(label, sizeof label, "  %lld MiB DMAs", static_cast<long long>(mib));
      std::printf("%-40s %10.2f %10.1f %12.2f\n", label, v * 1e3, gbs(v), h2d / v);
    }
  }
  return 0;
}

int RunWriteBack(bool quick, int direct_blocks) {
  absl::StatusOr<ModelConfig> named = ModelConfig::Named("llama3-8b");
  if (!named.ok()) return 1;
  ModelConfig c = *named;
  c.max_context = 32768;
  CudaModelOptions o;
  o.kv_pool_bytes = int64_t{24} << 30;
  o.initial_step_tokens = 512;
  o.kv_save_direct_blocks = direct_blocks;
  auto made = CudaModel::CreateRandom(c, 7, o);
  if (!made.ok() || !(*made)->RandomizeKvPool(3).ok()) {
    std::printf("kv_load_bench --writeback: %s\n", made.ok() ? "RandomizeKvPool failed" : std::string(made.status().message()).c_str());
    return 1;
  }
  CudaModel& m = **made;
  const int batch = 32, context = 1024, chunk_tokens = 256, chunks = quick ? 8 : 64;
  const storage::ChunkLayout layout = ChunkLayoutFor(m, chunk_tokens);
  const int64_t payload = layout.PayloadBytes(), total = payload * chunks;
  std::byte* arena = HostBuffer(total);
  if (arena == nullptr || !m.RegisterHostMemory(absl::Span<std::byte>(arena, static_cast<size_t>(total))).ok()) return 1;
  const double p0 = bench::NowSeconds();
  if (!m.PrepareKvSaves(layout).ok()) return 1;  // as the engine does at start
  const double prepare = bench::NowSeconds() - p0;
  std::vector<std::unique_ptr<SequenceState>> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(*m.NewSequence(context + 256));
  auto saved = *m.NewSequence(int64_t{chunks} * chunk_tokens);
  std::vector<int32_t> tokens(batch, 17), next(batch);
  int pos = context;
  auto step = [&]() {
    std::vector<ForwardEntry> entries;
    for (int b = 0; b < batch; ++b) {
      entries.push_back(ForwardEntry{seqs[b].get(), pos, absl::Span<const int32_t>(&tokens[b], 1), nullptr, &next[b]});
    }
    const double t0 = bench::NowSeconds();
    if (!m.Forward(entries).ok()) return -1.0;
    ++pos;
    return bench::NowSeconds() - t0;
  };
  auto save_all = [&]() {
    for (int i = 0; i < chunks; ++i) {
      absl::Span<std::byte> p(arena + i * payload, static_cast<size_t>(payload));
      if (!m.SaveKv(*saved, int64_t{i} * chunk_tokens, chunk_tokens, p, layout).ok()) return false;
    }
    return true;
  };
  for (int i = 0; i < 10; ++i) step();  // graphs captured, clocks up
  // One write-back first (steady state: the pages and the arena touched once).
  const double w0 = bench::NowSeconds();
  if (!save_all() || !m.FinishKvSaves().ok()) return 1;
  const double first_save = bench::NowSeconds() - w0;
  std::vector<double> quiet;
  for (int i = 0; i < 40; ++i) quiet.push_back(step());
  // Asynchronous: steps run while the copy is in flight, polled as the engine polls.
  std::vector<double> beside;
  const double t0 = bench::NowSeconds();
  if (!save_all()) return 1;
  absl::StatusOr<uint64_t> ticket = m.MarkKvSaves();
  if (!ticket.ok()) return 1;
  const double enqueue = bench::NowSeconds() - t0;
  for (;;) {
    beside.push_back(step());
    absl::StatusOr<bool> done = m.KvSavesDone(*ticket);
    if (!done.ok()) return 1;
    if (*done) break;
  }
  const double copy_window = bench::NowSeconds() - t0;
  // Synchronous (before this issue): the save waited on the host, then the step.
  const double s0 = bench::NowSeconds();
  if (!save_all() || !m.FinishKvSaves().ok()) return 1;
  const double sync_step = (bench::NowSeconds() - s0) + step();
  const double q = bench::Median(quiet);
  double worst = 0, sum = 0;
  for (double t : beside) {
    worst = std::max(worst, t);
    sum += t;
  }
  std::printf("\ndecode steps of %d sessions at %d tokens while a %d-token session (%.0f MiB) is written back, ",
              batch, context, chunks * chunk_tokens, total / 1048576.0);
  if (direct_blocks > 0) {
    std::printf("a gather of %d blocks writing the registered host memory (direct)\n", direct_blocks);
  } else {
    std::printf("gathered into device staging, then copied out (staged)\n");
  }
  std::printf("%-52s %10s %10s\n", "", "ms", "vs quiet");
  std::printf("%-52s %10.2f %10.2f\n", "step, nothing copied (median of 40)", q * 1e3, 1.0);
  std::printf("%-52s %10.2f %10.2f\n", "step beside the write-back (mean)", sum / beside.size() * 1e3,
              sum / beside.size() / q);
  std::printf("%-52s %10.2f %10.2f\n", "step beside the write-back (worst)", worst * 1e3, worst / q);
  // The engine enqueues a finished turn's write-back on its own thread between two steps:
  // the step after it starts that much later.
  const double first = enqueue + beside.front();
  std::printf("%-52s %10.2f %10.2f\n", "first step beside it, its enqueue included", first * 1e3, first / q);
  std::printf("%-52s %10.2f %10.2f\n", "step after a synchronous save (before)", sync_step * 1e3, sync_step / q);
  std::printf("save staging prepared at start: %.1f ms; a first write-back, enqueued and waited for: %.1f ms\n",
              prepare * 1e3, first_save * 1e3);
  std::printf("write-back: %.2f ms to enqueue, done within %.1f ms (%d steps ran beside it)\n", enqueue * 1e3,
              copy_window * 1e3, static_cast<int>(beside.size()));
  return 0;
}

}  // namespace
}  // namespace strata::model

int main(int argc, char** argv) {
  bool quick = false, writeback = false;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    writeback = writeback || std::strcmp(argv[i], "--writeback") == 0;
  }
  if (strata::model::CudaModel::DeviceCount() == 0) {
    std::printf("kv_load_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  // The write-back both ways in one run: the staged copy is the direct gather's peer.
  if (writeback) {
    int rc = 0;
    for (int blocks : {0, 8, 12, 16, 24}) rc |= strata::model::RunWriteBack(quick, blocks);
    return rc;
  }
  return strata::model::Run(quick);
}
