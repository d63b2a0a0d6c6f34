// Paged decode attention on the GPU vs the device's copy bandwidth, measured in the same
// run, on CUDA cores and on tensor cores (decode.h's DecodeKernel) and what kAuto picks:
// Llama-3-8B, Qwen2.5-7B, GQA-16, head_dim 64, 80, 96 and 256 attention shapes (bf16 KV, 16-token
// pages), batch 1-64, contexts 1K and 8K. The floor is the KV bytes every step must read;
// the ceilings are device-to-device cudaMemcpys (bytes read + written over their time):
// one of 1 GiB, and one moving as many bytes as the step reads (same launch overheads);
// and a read of the same rows of the same pages as the kernels read them, computing
// nothing (cuda_bench.h's PagedReadAsync): what reading those rows leaves of the bandwidth.
// L2 is flushed before each timed run (a 1K-token batch of 8 fits in the 50 MB L2).
//
//   build/tests/bench/decode_attention_bench        (needs a CUDA device; says so otherwise)
//   decode_attention_bench --parts_sweep   the tensor-core decode's time by the parts each
//       sequence's keys are split into, in one-warp blocks and in two- and four-warp blocks
//       that split a part's keys, against what the launch picks (GQA 6, 7 and 8, and the
//       shapes it runs on tensor cores)
//   decode_attention_bench --shape=GQA,batch,context   only the shapes of that many query
//       heads per KV head, batch and context (e.g. for a profiler: --shape=7,64,1024)
//   decode_attention_bench --gqa=7 --batches=1,2,4 --contexts=2048,4096   those batches and
//       contexts (any) in place of batch 1-64 x 1K/8K, for the shapes of that GQA (0: all)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/attention/decode.h"
#include "kernels/testing/paged_pool.h"
#include "tests/bench/cuda_bench.h"

namespace {

using strata::bench::MedianMs;
using strata::bench::Upload;

}  // namespace

int main(int argc, char** argv) {
  bool parts_sweep = false;
  int only_gqa = 0, only_batch = 0;
  long long only_context = 0;
  std::vector<int> batches = {1, 8, 16, 32, 64};
  std::vector<int64_t> contexts = {1024, 8192};
  // A comma-separated list of positive numbers, or empty when the text is not one.
  auto numbers = [](const std::string& text) {
    std::vector<int64_t> out;
    size_t at = 0;
    while (at <= text.size()) {
      const size_t end = std::min(text.find(',', at), text.size());
      const long long n = std::atoll(text.substr(at, end - at).c_str());
      if (n <= 0) return std::vector<int64_t>{};
      out.push_back(n);
      at = end + 1;
    }
    return out;
  };
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: decode_attention_bench [--parts_sweep] [--shape=GQA,batch,context] [--gqa=G] "
                 "[--batches=B,...] [--contexts=C,...]\n");
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--parts_sweep") {
      parts_sweep = true;
    } else if (a.rfind("--gqa=", 0) == 0) {
      only_gqa = std::atoi(a.c_str() + 6);
    } else if (a.rfind("--batches=", 0) == 0) {
      const std::vector<int64_t> b = numbers(a.substr(10));
      if (b.empty()) return usage();
      batches.assign(b.begin(), b.end());
    } else if (a.rfind("--contexts=", 0) == 0) {
      contexts = numbers(a.substr(11));
      if (contexts.empty()) return usage();
    } else if (std::sscanf(argv[i], "--shape=%d,%d,%lld", &only_gqa, &only_batch, &only_context) != 3) {
      return usage();
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: decode_attention_bench needs a GPU (skipped)\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  strata::bench::CopyCeiling ceiling(stream);
  float* sink = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(float)));
  auto flush = [&] { ceiling.Flush(); };
  const double big_copy_gbps = ceiling.Gbps();
  std::printf("%s, %d SMs; device-to-device copy of 1 GiB: %.0f GB/s (read + write)\n\n", prop.name,
              prop.multiProcessorCount, big_copy_gbps);
  if (!parts_sweep) std::printf(
      "| shape | batch | context | KV MB read | CUDA cores ms | GB/s | vs same-size copy | tensor cores ms | GB/s | "
      "vs same-size copy | auto | paged read ms | auto vs paged read |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct Shape {
    const char* name;
    int heads, kv_heads, head_dim;
  };
  // Llama-3-8B (GQA 4), Qwen2.5-7B (GQA 7), Qwen2.5-0.5B and -1.5B (GQA 7 and 6, two KV
  // heads), Llama-3-70B (GQA 8, 8 KV heads per GPU), a GQA-16 model, and head_dims 80, 96, 64
  // (Llama-3.2-1B) and 256.
  const Shape shapes[] = {{"llama3-8b 32:8x128", 32, 8, 128},
                          {"qwen2.5-7b 28:4x128", 28, 4, 128},
                          {"qwen2.5-0.5b 14:2x64", 14, 2, 64},
                          {"qwen2.5-1.5b 12:2x128", 12, 2, 128},
                          {"qwen2.5-14b 40:8x128", 40, 8, 128},
                          {"llama3-70b 64:8x128", 64, 8, 128},
                          {"gqa16 32:2x128", 32, 2, 128},
                          {"hd80 32:8x80", 32, 8, 80},
                          {"hd96 32:8x96", 32, 8, 96},
                          {"llama3.2-1b 32:8x64", 32, 8, 64},
                          {"gemma 16:8x256", 16, 8, 256}};
  using strata::kernels::DecodeKernel;
  const int page = 16;
  if (parts_sweep) {
    std::printf("\nparts sweep (tensor cores): ms by parts per sequence, and the launch's own pick\n");
  }
  for (const Shape& shape : shapes) {
    if (only_gqa != 0 && shape.heads / shape.kv_heads != only_gqa) continue;
    const int kv_heads = shape.kv_heads, heads = shape.heads, head_dim = shape.head_dim;
    for (int64_t context : contexts) {
      for (int batch : batches) {
        // The sweep takes the shapes the launch runs on the tensor cores, and GQA 6 to 8 at any batch.
        if (parts_sweep && shape.heads / shape.kv_heads < 6 &&
            !strata::kernels::DecodeRunsOnTensorCores(DecodeKernel::kAuto, head_dim, heads,
                                                      kv_heads, batch, context)) {
          continue;
        }
        if (only_batch != 0 && (batch != only_batch || context != only_context)) continue;
        const std::vector<int64_t> lengths(static_cast<size_t>(batch), context);
        const auto pool = strata::kernels::test_support::RandomPagedPool(lengths, page, kv_heads, head_dim, 1);
        uint16_t* k = Upload(pool.k);
        uint16_t* v = Upload(pool.v);
        int32_t* indptr = Upload(pool.indptr);
        int32_t* indices = Upload(pool.indices);
        int32_t* last = Upload(pool.last_page_len);
        std::vector<float> qh(static_cast<size_t>(batch) * heads * head_dim);
        for (size_t i = 0; i < qh.size(); ++i) qh[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        float* q = Upload(qh);
        float *out = nullptr, *lse = nullptr, *ws = nullptr;
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), qh.size() * sizeof(float)));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse), static_cast<size_t>(batch) * heads * sizeof(float)));
        const int64_t ws_floats = strata::kernels::DecodeWorkspaceFloats(batch, heads, head_dim, context);
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&ws), static_cast<size_t>(std::max<int64_t>(1, ws_floats)) *
                                                                 sizeof(float)));
        const strata::kernels::PagedKv kv{k, v, page, kv_heads, head_dim, indptr, indices, last};
        auto time = [&](DecodeKernel kernel) {
          return MedianMs(
              stream, 20,
              [&] {
                absl::Status s = strata::kernels::LaunchPagedDecodeAttention(
                    {q, kv, batch, heads, 0.088f, context, ws, out, lse, kernel}, stream);
                if (!s.ok()) {
                  std::fprintf(stderr, "%s\n", s.ToString().c_str());
                  std::exit(1);
                }
              },
              flush);
        };
        auto release = [&] {
          for (void* p : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(indptr),
                          static_cast<void*>(indices), static_cast<void*>(last), static_cast<void*>(q),
                          static_cast<void*>(out), static_cast<void*>(lse), static_cast<void*>(ws)}) {
            CHECK_CUDA(cudaFree(p));
          }
        };
        if (parts_sweep) {
          std::printf("%s batch %d context %lld:", shape.name, batch, static_cast<long long>(context));
          for (int parts : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 64, 128, 256}) {
            if (parts > (context + 31) / 32) break;
            strata::kernels::SetTensorCoreDecodePartsForBenchmarks(parts);
            std::printf(" %d: %.4f", parts, time(DecodeKernel::kTensorCores));
          }
          // Blocks of two warps splitting each part's keys (no merge at one part).
          strata::kernels::SetTensorCoreDecodeKeyWarpsForTesting(strata::kernels::KeyWarps::kAlways);
          std::printf(" | two-warp");
          for (int parts : {1, 2, 3, 4}) {
            if (parts > (context + 31) / 32) break;
            strata::kernels::SetTensorCoreDecodePartsForBenchmarks(parts);
            std::printf(" %d: %.4f", parts, time(DecodeKernel::kTensorCores));
          }
          strata::kernels::SetTensorCoreDecodeKeyWarpsForTesting(strata::kernels::KeyWarps::kFour);
          std::printf(" | four-warp");
          for (int parts : {1, 2, 4}) {
            if (parts > (context + 31) / 32) break;
            strata::kernels::SetTensorCoreDecodePartsForBenchmarks(parts);
            std::printf(" %d: %.4f", parts, time(DecodeKernel::kTensorCores));
          }
          strata::kernels::SetTensorCoreDecodeKeyWarpsForTesting(strata::kernels::KeyWarps::kAuto);
          strata::kernels::SetTensorCoreDecodePartsForBenchmarks(0);
          std::printf(" | picked %.4f ms\n", time(DecodeKernel::kTensorCores));
          release();
          continue;
        }
        const float cuda_ms = time(DecodeKernel::kCudaCores), tc_ms = time(DecodeKernel::kTensorCores);
        const float auto_ms = time(DecodeKernel::kAuto);
        const float read_ms = MedianMs(
            stream, 20, [&] { CHECK_CUDA(strata::bench::PagedReadAsync(kv, batch, context, sink, stream)); }, flush);
        const double bytes = 2.0 * batch * context * kv_heads * head_dim * 2;  // K and V, bf16
        const double same_gbps = ceiling.Gbps(static_cast<size_t>(bytes / 2));  // reads + writes `bytes`
        const double cuda_gbps = bytes / (cuda_ms * 1e-3) / 1e9, tc_gbps = bytes / (tc_ms * 1e-3) / 1e9;
        std::printf("| %s | %d | %lld | %.0f | %.3f | %.0f | %.2f | %.3f | %.0f | %.2f | %s | %.3f | %.2f |\n",
                    shape.name, batch, static_cast<long long>(context), bytes / 1e6, cuda_ms, cuda_gbps,
                    cuda_gbps / same_gbps, tc_ms, tc_gbps, tc_gbps / same_gbps,
                    std::abs(auto_ms - tc_ms) < std::abs(auto_ms - cuda_ms) ? "tensor" : "cuda", read_ms,
                    read_ms / auto_ms);
        release();
      }
    }
  }
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
