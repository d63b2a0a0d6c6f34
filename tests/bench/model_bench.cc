// model_bench: the CUDA backend's decode step and prefill on random weights with real
// model shapes, against the device's own limits measured in the same run:
//   - decode step time at batch 1/8/32/64 x context 1K/8K, as a fraction of the HBM
//     roofline: (weight bytes + KV bytes read per step) / measured copy bandwidth;
//   - prefill of one 512..8K-token prompt: tokens/s and MFU against the measured bf16
//     matrix-product peak (cuBLAS, 8192^3) and the H100 SXM datasheet's 989 TFLOP/s;
//   - a returning turn: 80 new tokens over a 1K..30K-token history already in HBM (the
//     compute of a cached turn's new tokens), with the prefill's split along the keys on
//     and off, against max(bytes / copy bandwidth, FLOPs / matrix peak).
// HF transformers on the same GPU and shapes: tests/bench/model_bench_hf.py.
//
//   model_bench [--models=llama3-8b,llama3-1b] [--quick] [--graphs=0] [--decode_only]
//       [--compare_skinny]   (each decode step also with cuBLAS for every product, beside it)
//       [--compare_tuning]   (each decode step also with cuBLAS's default for its cuBLAS products,
//                             beside the tuned ones, and the shapes tuning chose for)
//   model_bench --models=llama3-8b --profile=BATCH,CONTEXT   (for ncu --profile-from-start off:
//       two warm-up decode steps, then one between cudaProfilerStart and Stop, no graphs)
//   model_bench --pair=qwen2.5-7b,llama3-8b [--rounds=N]   (both models on the GPU at once; each
//       decode shape timed N times (default 7) alternately on the one and the other, so that
//       clock and thermal drift between the two does not enter their ratio: the ratio of their
//       roofline fractions from the median step of each, and its range over the rounds)
// Without a GPU it says so and exits 0.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/cuda/cuda_model.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/gemm.h"
#include "kernels/rope/rope_cpu.h"
#include "tests/bench/cuda_bench.h"

namespace strata::model {
namespace {

// The named shape (ModelConfig::Named; an unknown name is llama3-1b's) with a 30K window.
ModelConfig Shape(const std::string& name) {
  auto named = ModelConfig::Named(name);
  ModelConfig c = named.ok() ? *named : *ModelConfig::Named("llama3-1b");
  c.max_context = 30720 + 256;
  return c;
}

// Device-to-device copy bandwidth, bytes read plus written per second.
double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (i >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms[ms.size() / 2] / 1e3);
}

// bf16 cuBLAS matrix-product rate at 8192^3, FLOP/s.
double GemmPeak() {
  const int n = 8192;
  uint16_t *x = nullptr, *w = nullptr;
  float* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&x), size_t{2} * n * n);
  cudaMalloc(reinterpret_cast<void**>(&w), size_t{2} * n * n);
  cudaMalloc(reinterpret_cast<void**>(&out), size_t{4} * n * n);
  (void)kernels::LaunchFillRandomBf16({x, int64_t{n} * n, 1, 1.0f}, nullptr);
  (void)kernels::LaunchFillRandomBf16({w, int64_t{n} * n, 2, 1.0f}, nullptr);
  cudaDeviceSynchronize();
  std::vector<double> t;
  for (int i = 0; i < 8; ++i) {
    const double t0 = bench::NowSeconds();
    (void)kernels::LaunchMatMulBf16({x, w, out, n, n, n}, nullptr);
    cudaDeviceSynchronize();
    if (i >= 2) t.push_back(bench::NowSeconds() - t0);
  }
  std::sort(t.begin(), t.end());
  cudaFree(x);
  cudaFree(w);
  cudaFree(out);
  return 2.0 * n * n * double{n} / t[t.size() / 2];
}


// One decode step of `batch` sequences at `context` tokens inside a profiler range.
int Profile(const std::string& name, int batch, int context) {
  const ModelConfig c = Shape(name);
  CudaModelOptions o;
  o.cuda_graphs = false;
  o.kv_memory_fraction = 0.9;
  auto made = CudaModel::CreateRandom(c, 1234, o);
  if (!made.ok() || !(*made)->RandomizeKvPool(7).ok()) return 1;
  CudaModel& m = **made;
  std::vector<std::unique_ptr<SequenceState>> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(*m.NewSequence(context + 8));
  std::vector<int32_t> tokens(static_cast<size_t>(batch), 17), next(static_cast<size_t>(batch));
  for (int s = 0; s < 3; ++s) {
    std::vector<ForwardEntry> entries;
    for (int b = 0; b < batch; ++b) {
      entries.push_back(ForwardEntry{seqs[b].get(), context + s, absl::Span<const int32_t>(&tokens[b], 1), nullptr,
                                     &next[b]});
    }
    if (s == 2) cudaProfilerStart();
    if (!m.Forward(entries).ok()) return 1;
    if (s == 2) cudaProfilerStop();
  }
  std::printf("profiled one decode step of %s, batch %d, context %d\n", name.c_str(), batch, context);
  return 0;
}

// The cuBLAS shapes tuned so far (kernels/gemm/cublas.h): what each chose and gained.
void PrintTunedMatMuls() {
  std::printf("tuned cuBLAS products (rows x in x out: default us -> chosen us, of N cublasLt candidates)\n");
  for (const kernels::MatMulTuning& t : kernels::TunedMatMuls()) {
    std::printf("  %4d x %5d x %6d: %8.1f -> %8.1f us (%s, %d candidates)\n", t.rows, t.in_dim, t.out_dim,
                t.default_us, t.chosen_us, t.cublaslt ? "cublasLt" : "default", t.candidates);
  }
}

// Median seconds of `steps` decode steps (after 2 warm-ups) of `seqs`, each at position
// ctx + s; negative if a step failed (printed).
double TimeDecodeSteps(CudaModel& m, const ModelConfig& c, const std::vector<std::unique_ptr<SequenceState>>& seqs,
                       int ctx, int steps) {
  const size_t batch = seqs.size();
  std::vector<int32_t> tokens(batch), greedy(batch);
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    std::vector<ForwardEntry> entries;
    for (size_t b = 0; b < batch; ++b) {
      tokens[b] = static_cast<int32_t>((b * 7919 + s * 31) % c.vocab_size);
      entries.push_back(ForwardEntry{seqs[b].get(), ctx + s, absl::Span<const int32_t>(&tokens[b], 1), nullptr,
                                     &greedy[b]});
    }
    const double t0 = bench::NowSeconds();
    absl::Status st = m.Forward(entries);
    const double t = bench::NowSeconds() - t0;
    if (!st.ok()) {
      std::printf("forward: %s\n", std::string(st.message()).c_str());
      return -1;
    }
    if (s >= 2) times.push_back(t);
  }
  return bench::Median(times);
}

// Bytes a decode step of `batch` sequences at `ctx` tokens must read: every weight once (the
// embedding table only for the batch's rows, unless it is also the LM head), and every
// cached K and V.
double DecodeStepBytes(const CudaModel& m, const ModelConfig& c, int batch, int ctx) {
  const int64_t h = c.hidden_size, v = c.vocab_size;
  const int64_t embed_bytes = 2 * v * h;
  const double weights_read = static_cast<double>(m.weight_bytes() - (c.tie_embeddings ? 0 : embed_bytes));
  const double kv_token_bytes = 2.0 * c.num_layers * c.kv_dim() * 2;
  return weights_read + batch * (embed_bytes / v) + batch * (ctx + 1.0) * kv_token_bytes;
}

struct RunOptions {
  bool quick = false, graphs = true, decode_only = false, compare_skinny = false, compare_tuning = false;
};

// A model of the named shape on random weights, its KV pool filled with random values; null
// (the reason printed) when it cannot be made.
std::unique_ptr<CudaModel> RandomModel(const std::string& name, const ModelConfig& c, const CudaModelOptions& o) {
  auto made = CudaModel::CreateRandom(c, 1234, o);
  absl::Status s = made.ok() ? (*made)->RandomizeKvPool(99) : made.status();
  if (!s.ok()) {
    std::printf("%s: %s\n", name.c_str(), std::string(s.message()).c_str());
    return nullptr;
  }
  return *std::move(made);
}

void Run(const std::string& name, const RunOptions& ro, double copy_bw, double peak) {
  const bool quick = ro.quick, graphs = ro.graphs;
  const ModelConfig c = Shape(name);
  CudaModelOptions o;
  o.cuda_graphs = graphs;
  o.kv_memory_fraction = 0.9;
  o.initial_step_tokens = 8192;
  const std::unique_ptr<CudaModel> model = RandomModel(name, c, o);
  if (model == nullptr) return;
  CudaModel& m = *model;
  const int64_t h = c.hidden_size, v = c.vocab_size;
  const int64_t embed_bytes = 2 * v * h;
  // The bytes DecodeStepBytes counts (the turns below count theirs the same way).
  const double weights_read = static_cast<double>(m.weight_bytes() - (c.tie_embeddings ? 0 : embed_bytes));
  const double kv_token_bytes = 2.0 * c.num_layers * c.kv_dim() * 2;
  const int64_t capacity_tokens = m.pool_pages() * m.page_tokens();
  std::printf("\n%s (decode steps %s CUDA graphs): %.2f GB of bf16 weights, KV pool %lld tokens (%.1f GB)\n",
              name.c_str(), graphs ? "as" : "without",
              static_cast<double>(m.weight_bytes()) / 1e9, static_cast<long long>(capacity_tokens),
              capacity_tokens * kv_token_bytes * 1.5 / 1e9);
  std::printf("%-8s %-8s %12s %12s %14s %10s", "batch", "context", "step_ms", "tokens/s", "roofline_ms", "fraction");
  if (ro.compare_skinny) std::printf(" %14s %14s", "cublas_ms", "cublas_frac");
  if (ro.compare_tuning) std::printf(" %14s %14s", "untuned_ms", "untuned_frac");
  std::printf("\n");
  const int steps = quick ? 3 : 10;
  for (int ctx : {1024, 8192}) {
    for (int batch : {1, 8, 16, 32, 64}) {
      if (int64_t{batch} * (ctx + 64) > capacity_tokens) {
        std::printf("%-8d %-8d %12s (the KV of %d x %d does not fit this GPU's pool)\n", batch, ctx, "-", batch, ctx);
        continue;
      }
      std::vector<std::unique_ptr<SequenceState>> seqs;
      for (int b = 0; b < batch; ++b) seqs.push_back(*m.NewSequence(ctx + 32));
      auto time_steps = [&] { return TimeDecodeSteps(m, c, seqs, ctx, steps); };
      const double t = time_steps();
      if (t < 0) return;
      // The same steps with one option off (CudaModel::set_skinny_matmul, set_tune_matmuls).
      auto time_without = [&](void (CudaModel::*set)(bool)) {
        (m.*set)(false);
        const double off = time_steps();
        (m.*set)(true);
        return off;
      };
      const double t_cublas = ro.compare_skinny ? time_without(&CudaModel::set_skinny_matmul) : 0;
      const double t_untuned = ro.compare_tuning ? time_without(&CudaModel::set_tune_matmuls) : 0;
      if (t_cublas < 0 || t_untuned < 0) return;
      const double floor = DecodeStepBytes(m, c, batch, ctx) / copy_bw;  // copy_bw counts every byte moved, read or written
      std::printf("%-8d %-8d %12.3f %12.0f %14.3f %10.2f", batch, ctx, t * 1e3, batch / t, floor * 1e3, floor / t);
      if (ro.compare_skinny) std::printf(" %14.3f %14.2f", t_cublas * 1e3, floor / t_cublas);
      if (ro.compare_tuning) std::printf(" %14.3f %14.2f", t_untuned * 1e3, floor / t_untuned);
      std::printf("\n");
    }
  }
  if (ro.compare_tuning) PrintTunedMatMuls();
  if (ro.decode_only) return;

  // The device sampler's cost: the same decode steps drawing with temperature and top-p.
  for (int batch : {1, 64}) {
    const int ctx = 1024;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    for (int b = 0; b < batch; ++b) seqs.push_back(*m.NewSequence(ctx + 32));
    std::vector<int32_t> tokens(static_cast<size_t>(batch)), next(static_cast<size_t>(batch));
    double ms[2];
    for (int sampled = 0; sampled < 2; ++sampled) {
      std::vector<double> times;
      for (int s = 0; s < steps + 2; ++s) {
        std::vector<ForwardEntry> entries;
        for (int b = 0; b < batch; ++b) {
          tokens[b] = (b * 7919 + s * 31) % c.vocab_size;
          ForwardEntry e{seqs[b].get(), ctx + s, absl::Span<const int32_t>(&tokens[b], 1), nullptr, &next[b]};
          if (sampled) e.sampling = TokenSampling{0.8f, 0.9f, (s * 0.37 + b * 0.11) - static_cast<int>(s * 0.37 + b * 0.11)};
          entries.push_back(e);
        }
        const double t0 = bench::NowSeconds();
        if (!m.Forward(entries).ok()) return;
        if (s >= 2) times.push_back(bench::NowSeconds() - t0);
      }
      ms[sampled] = bench::Median(times) * 1e3;
    }
    std::printf("sampling (T 0.8, top-p 0.9) at batch %d x 1K: %.3f ms a step vs %.3f greedy (+%.3f ms)\n", batch,
                ms[1], ms[0], ms[1] - ms[0]);
  }

  std::printf("%-8s %12s %12s %12s %10s %10s\n", "prompt", "prefill_ms", "tokens/s", "TFLOP/s", "MFU_meas",
              "MFU_989");
  // Matrix parameters a token goes through (the LM head only for the last one).
  const double layer_params = static_cast<double>(h) * (c.q_dim() + 2 * c.kv_dim()) + static_cast<double>(h) * c.q_dim() +
                              3.0 * h * c.intermediate_size;
  for (int n : {512, 1024, 2048, 4096, 8192}) {
    if (quick && n > 1024) break;
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) prompt[i] = (i * 104729) % c.vocab_size;
    std::vector<double> times;
    for (int rep = 0; rep < (quick ? 2 : 4); ++rep) {
      auto seq = m.NewSequence(n);
      if (!seq.ok()) {
        std::printf("%-8d %s\n", n, std::string(seq.status().message()).c_str());
        break;
      }
      int32_t greedy = -1;
      ForwardEntry e{seq->get(), 0, absl::Span<const int32_t>(prompt), nullptr, &greedy};
      const double t0 = bench::NowSeconds();
      absl::Status st = m.Forward({&e, 1});
      const double t = bench::NowSeconds() - t0;
      if (!st.ok()) {
        std::printf("forward: %s\n", std::string(st.message()).c_str());
        return;
      }
      if (rep >= 1) times.push_back(t);
    }
    if (times.empty()) continue;
    const double t = bench::Median(times);
    const double attn_flops = 2.0 * static_cast<double>(n) * (n + 1) * c.q_dim() * c.num_layers;  // causal QK^T + PV
    const double flops = 2.0 * n * layer_params * c.num_layers + 2.0 * h * v + attn_flops;
    std::printf("%-8d %12.2f %12.0f %12.1f %10.2f %10.2f\n", n, t * 1e3, n / t, flops / t / 1e12, flops / t / peak,
                flops / t / 989e12);
  }

  // A returning turn whose history is in HBM: the step that computes its new tokens (the
  // answer's 16 and the user's 64, as strata bench's sweep sends them), timed with the
  // prefill's split along the keys on and off. Floor: every weight and the history's KV read
  // once at the copy rate, or the FLOPs at the matrix peak, whichever is longer.
  const int turn = 80;
  std::printf("%-8s %-6s %12s %12s %12s %10s %10s\n", "history", "new", "split_ms", "unsplit_ms", "floor_ms",
              "fraction", "speedup");
  for (int history : {1024, 4096, 16384, 30720}) {
    if (quick && history > 4096) break;
    if (history + turn > capacity_tokens) continue;
    std::vector<int32_t> tokens(static_cast<size_t>(turn));
    for (int i = 0; i < turn; ++i) tokens[i] = (i * 7919 + history) % c.vocab_size;
    auto seq = m.NewSequence(history + turn);
    if (!seq.ok()) {
      std::printf("%-8d %s\n", history, std::string(seq.status().message()).c_str());
      break;
    }
    double ms[2];
    for (int split = 1; split >= 0; --split) {
      m.set_prefill_key_splits(split);
      std::vector<double> times;
      for (int rep = 0; rep < (quick ? 3 : 8); ++rep) {
        int32_t greedy = -1;
        ForwardEntry e{seq->get(), history, absl::Span<const int32_t>(tokens), nullptr, &greedy};
        const double t0 = bench::NowSeconds();
        if (absl::Status st = m.Forward({&e, 1}); !st.ok()) {
          std::printf("forward: %s\n", std::string(st.message()).c_str());
          return;
        }
        if (rep >= 2) times.push_back(bench::NowSeconds() - t0);
      }
      ms[split] = bench::Median(times) * 1e3;
    }
    m.set_prefill_key_splits(true);
    const double attn_flops = 4.0 * turn * (history + turn / 2.0) * c.q_dim() * c.num_layers;
    const double flops = 2.0 * turn * layer_params * c.num_layers + 2.0 * h * v + attn_flops;
    const double bytes = weights_read + turn * (embed_bytes / v) + (history + turn) * kv_token_bytes;
    const double floor_ms = std::max(bytes / copy_bw, flops / peak) * 1e3;
    std::printf("%-8d %-6d %12.3f %12.3f %12.3f %10.2f %9.2fx\n", history, turn, ms[1], ms[0], floor_ms,
                floor_ms / ms[1], ms[0] / ms[1]);
  }
}

// Two models on the GPU at once, each decode shape timed `rounds` times alternately on the
// one and the other (each time the median of 10 steps): the ratio of their roofline
// fractions from each model's median, and the range of the per-round ratios.
void RunPair(const std::string& a_name, const std::string& b_name, int rounds, double copy_bw) {
  const std::string names[2] = {a_name, b_name};
  ModelConfig configs[2];
  std::unique_ptr<CudaModel> models[2];
  for (int i = 0; i < 2; ++i) {
    configs[i] = Shape(names[i]);
    CudaModelOptions o;
    o.kv_memory_fraction = i == 0 ? 0.4 : 0.7;  // of what is free: about the same pool each
    models[i] = RandomModel(names[i], configs[i], o);
    if (models[i] == nullptr) return;
  }
  std::printf("\n%s vs %s, decode steps as CUDA graphs, %d alternating rounds of 10 steps a shape\n", a_name.c_str(),
              b_name.c_str(), rounds);
  std::printf("| batch | context | %s ms | %s ms | %s fraction | %s fraction | ratio | per-round ratios |\n",
              a_name.c_str(), b_name.c_str(), a_name.c_str(), b_name.c_str());
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int ctx : {1024, 8192}) {
    for (int batch : {1, 8, 16, 32, 64}) {
      std::vector<std::unique_ptr<SequenceState>> seqs[2];
      bool fits = true;
      for (int i = 0; i < 2 && fits; ++i) {
        for (int b = 0; b < batch && fits; ++b) {
          auto seq = models[i]->NewSequence(ctx + 32);
          if (!seq.ok()) fits = false;
          else seqs[i].push_back(*std::move(seq));
        }
      }
      if (!fits) {
        std::printf("| %d | %d | (the KV does not fit both pools) |\n", batch, ctx);
        continue;
      }
      std::vector<double> times[2], ratios;
      double floor[2];
      for (int i = 0; i < 2; ++i) floor[i] = DecodeStepBytes(*models[i], configs[i], batch, ctx) / copy_bw;
      for (int r = 0; r < rounds; ++r) {
        double t[2];
        for (int i = 0; i < 2; ++i) {
          t[i] = TimeDecodeSteps(*models[i], configs[i], seqs[i], ctx, 10);
          if (t[i] < 0) return;
          times[i].push_back(t[i]);
        }
        ratios.push_back((floor[0] / t[0]) / (floor[1] / t[1]));
      }
      const double ta = bench::Median(times[0]), tb = bench::Median(times[1]);
      std::sort(ratios.begin(), ratios.end());
      std::printf("| %d | %d | %.3f | %.3f | %.3f | %.3f | **%.3f** | %.3f-%.3f |\n", batch, ctx, ta * 1e3, tb * 1e3,
                  floor[0] / ta, floor[1] / tb, (floor[0] / ta) / (floor[1] / tb), ratios.front(), ratios.back());
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace strata::model

int main(int argc, char** argv) {
  strata::model::RunOptions ro;
  int profile_batch = 0, profile_context = 0, rounds = 7;
  std::string pair;
  std::string models = "llama3-8b,llama3-1b";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") ro.quick = true;
    if (a == "--graphs=0") ro.graphs = false;
    if (a == "--decode_only") ro.decode_only = true;
    if (a == "--compare_skinny") ro.compare_skinny = true;
    if (a == "--compare_tuning") ro.compare_tuning = true;
    if (a.rfind("--profile=", 0) == 0) std::sscanf(a.c_str() + 10, "%d,%d", &profile_batch, &profile_context);
    if (a.rfind("--models=", 0) == 0) models = a.substr(9);
    if (a.rfind("--pair=", 0) == 0) pair = a.substr(7);
    if (a.rfind("--rounds=", 0) == 0) rounds = std::max(1, std::atoi(a.c_str() + 9));
  }
  if (strata::model::CudaModel::DeviceCount() == 0) {
    std::printf("model_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  if (profile_batch > 0) {
    return strata::model::Profile(models.substr(0, models.find(',')), profile_batch, profile_context);
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double copy_bw = strata::model::CopyBandwidth();
  const double peak = strata::model::GemmPeak();
  std::printf("device: %s; copy bandwidth %.0f GB/s (read + write); bf16 cuBLAS 8192^3: %.0f TFLOP/s\n", prop.name,
              copy_bw / 1e9, peak / 1e12);
  if (!pair.empty()) {
    const size_t comma = pair.find(',');
    if (comma == std::string::npos) {
      std::fprintf(stderr, "--pair takes two model names: A,B\n");
      return 2;
    }
    strata::model::RunPair(pair.substr(0, comma), pair.substr(comma + 1), ro.quick ? 1 : rounds, copy_bw);
    return 0;
  }
  size_t start = 0;
  while (start <= models.size()) {
    const size_t end = models.find(',', start);
    const std::string name = models.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!name.empty()) strata::model::Run(name, ro, copy_bw, peak);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return 0;
}
