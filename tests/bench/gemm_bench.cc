// The CUDA backend's linear layers (cuBLAS, bf16 operands, fp32 accumulation) on the
// shapes of Llama-3-8B, against the two ceilings measured or stated for the same run:
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
  const size_t copy_bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, copy_bytes));
  CHECK_CUDA(cudaMalloc(&dst, copy_bytes));
  CHECK_CUDA(cudaMemset(src, 1, copy_bytes));
  const float copy_ms =
      MedianMs(stream, 20, [&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream)); });
  const double copy_gbps = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e-3) / 1e9;
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
  const double peak_tflops = 989.4;
  std::printf("%s; device-to-device copy %.0f GB/s (read + write); bf16 dense peak %.0f TFLOP/s (datasheet)\n\n",
              prop.name, copy_gbps, peak_tflops);
  std::printf("| layer | rows | in | out | ms | TFLOP/s | MFU | weight GB/s | vs copy |\n|---|---|---|---|---|---|---|---|---|\n");
  struct Layer {
    const char* name;
    int in, out;
  };
  const Layer layers[] = {{"qkv", 4096, 6144}, {"o", 4096, 4096}, {"gate+up", 4096, 28672}, {"down", 14336, 4096}};
  for (const Layer& l : layers) {
    void* w = DeviceRandomBf16(static_cast<size_t>(l.in) * l.out);
    for (int rows : {1, 32, 512, 4096}) {
      void* x = DeviceRandomBf16(static_cast<size_t>(rows) * l.in);
      float* out = nullptr;
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), static_cast<size_t>(rows) * l.out * sizeof(float)));
      const float ms = MedianMs(stream, 20, [&] {
        absl::Status s = strata::kernels::LaunchMatMulBf16({static_cast<const uint16_t*>(x),
                                                           static_cast<const uint16_t*>(w), out, rows, l.in, l.out},
                                                           stream);
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          std::exit(1);
        }
      });
      const double flops = 2.0 * rows * l.in * l.out;
      const double tflops = flops / (ms * 1e-3) / 1e12;
      const double weight_gbps = 2.0 * l.in * l.out / (ms * 1e-3) / 1e9;
      std::printf("| %s | %d | %d | %d | %.3f | %.0f | %.2f | %.0f | %.2f |\n", l.name, rows, l.in, l.out, ms, tflops,
                  tflops / peak_tflops, weight_gbps, weight_gbps / copy_gbps);
      CHECK_CUDA(cudaFree(x));
      CHECK_CUDA(cudaFree(out));
    }
    CHECK_CUDA(cudaFree(w));
  }
  return 0;
}
