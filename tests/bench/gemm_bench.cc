// The CUDA backend's linear layers (bf16 operands, fp32 accumulation: cuBLAS, and the skinny
// kernel decode steps take) on the shapes of Llama-3-8B, Qwen3-8B and Qwen2.5-7B, against
// the two ceilings measured or stated for the same run:
// the device-to-device copy bandwidth (for small batches a linear layer is a read of its
// weights) and the dense bf16 tensor-core peak (989 TFLOP/s on H100/H200 SXM, datasheet).
//
//   build/tests/bench/gemm_bench        (needs a CUDA device; says so otherwise)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/skinny_launch.h"
#include "tests/bench/cuda_bench.h"

namespace {

using strata::bench::MedianMs;
using strata::bench::Upload;

void* DeviceRandomBf16(size_t n) {
  std::vector<uint16_t> h(n);
  uint32_t s = 12345;
  for (uint16_t& v : h) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(0x3c00 | (s >> 22 & 0x7f) | (s >> 31) << 15);  // +-[2^-7, 2^-6)
  }
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * 2));
  CHECK_CUDA(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  return p;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: gemm_bench needs a GPU (skipped)\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  // The L2 is flushed before every timed product (a decode step reads each layer's weights
  // once, after the layers before it pushed them out), and the copy is measured the same way.
  strata::bench::CopyCeiling ceiling(stream);
  const double copy_gbps = ceiling.Gbps();
  const double peak_tflops = 989.4;
  std::printf("%s; device-to-device copy %.0f GB/s (read + write); bf16 dense peak %.0f TFLOP/s (datasheet)\n\n",
              prop.name, copy_gbps, peak_tflops);
  std::printf("cuBLAS (GemmEx) and the skinny kernel (1..16 rows): ms, and the weights' read rate as a fraction of\n"
              "the copy rate\n\n");
  std::printf("| model | layer | rows | in | out | cuBLAS ms | vs copy | MFU | skinny ms | vs copy | cuBLAS / skinny |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  struct Layer {
    const char* model;
    const char* name;
    int in, out;
  };
  const Layer layers[] = {{"Llama-3-8B", "qkv", 4096, 6144},         {"Llama-3-8B", "o", 4096, 4096},
                          {"Llama-3-8B", "gate+up", 4096, 28672},    {"Llama-3-8B", "down", 14336, 4096},
                          {"Llama-3-8B", "lm_head", 4096, 128256},   {"Qwen3-8B", "gate+up", 4096, 24576},
                          {"Qwen3-8B", "down", 12288, 4096},         {"Qwen3-8B", "lm_head", 4096, 151936},
                          {"Qwen2.5-7B", "qkv", 3584, 4608},         {"Qwen2.5-7B", "o", 3584, 3584},
                          {"Qwen2.5-7B", "gate+up", 3584, 37888},    {"Qwen2.5-7B", "down", 18944, 3584}};
  auto fail = [](const absl::Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
  };
  for (const Layer& l : layers) {
    void* w = DeviceRandomBf16(static_cast<size_t>(l.in) * l.out);
    for (int rows : {1, 8, 16, 32, 512, 4096}) {
      if (rows > 32 && l.out > 40000) continue;  // the vocabulary is only ever a decode's product
      void* x = DeviceRandomBf16(static_cast<size_t>(rows) * l.in);
      float* out = nullptr;
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), static_cast<size_t>(rows) * l.out * sizeof(float)));
      const auto* xs = static_cast<const uint16_t*>(x);
      const auto* ws = static_cast<const uint16_t*>(w);
      auto time = [&](auto fn) { return MedianMs(stream, 20, fn, [&] { ceiling.Flush(); }); };
      const float cublas_ms = time([&] {
        fail(strata::kernels::LaunchMatMulBf16({xs, ws, out, rows, l.in, l.out, strata::kernels::MatMulPath::kCublas},
                                               stream));
      });
      const double flops = 2.0 * rows * l.in * l.out, bytes = 2.0 * l.in * l.out;
      auto rate = [&](float ms) { return bytes / (ms * 1e-3) / 1e9 / copy_gbps; };
      std::printf("| %s | %s | %d | %d | %d | %.4f | %.2f | %.2f |", l.model, l.name, rows, l.in, l.out, cublas_ms,
                  rate(cublas_ms), flops / (cublas_ms * 1e-3) / 1e12 / peak_tflops);
      if (strata::kernels::internal::SkinnyMatMulFits(xs, ws, rows, l.in, l.out)) {
        const float skinny = time([&] {
          fail(strata::kernels::LaunchMatMulBf16({xs, ws, out, rows, l.in, l.out, strata::kernels::MatMulPath::kSkinny},
                                                 stream));
        });
        std::printf(" %.4f | %.2f | %.2f |\n", skinny, rate(skinny), cublas_ms / skinny);
      } else {
        std::printf(" — | — | — |\n");
      }
      CHECK_CUDA(cudaFree(x));
      CHECK_CUDA(cudaFree(out));
    }
    CHECK_CUDA(cudaFree(w));
  }
  return 0;
}
