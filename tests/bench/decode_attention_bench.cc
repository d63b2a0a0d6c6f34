// Paged decode attention on the GPU vs the device's copy bandwidth, measured in the same
// run: Llama-3-8B attention shapes (32 query heads, 8 KV heads of 128, bf16 KV, 16-token
// pages), batch 1-64, contexts 1K and 8K. The floor is the KV bytes every step must read;
// the ceilings are device-to-device cudaMemcpys (bytes read + written over their time):
// one of 1 GiB, and one moving as many bytes as the step reads (same launch overheads).
// L2 is flushed before each timed run (a 1K-token batch of 8 fits in the 50 MB L2).
//
//   build/tests/bench/decode_attention_bench        (needs a CUDA device; says so otherwise)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/attention/decode.h"
#include "kernels/testing/paged_pool.h"
#include "tests/bench/cuda_bench.h"

namespace {

using strata::bench::MedianMs;
using strata::bench::Upload;

}  // namespace

int main() {
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
  auto flush = [&] { ceiling.Flush(); };
  const double big_copy_gbps = ceiling.Gbps();
  std::printf("%s, %d SMs; device-to-device copy of 1 GiB: %.0f GB/s (read + write)\n\n", prop.name,
              prop.multiProcessorCount, big_copy_gbps);
  std::printf(
      "| batch | context | KV MB read | ms | GB/s | vs 1 GiB copy | same-size copy GB/s | vs same-size copy |\n"
      "|---|---|---|---|---|---|---|---|\n");
  const int kv_heads = 8, heads = 32, head_dim = 128, page = 16;
  for (int64_t context : {1024, 8192}) {
    for (int batch : {1, 8, 32, 64}) {
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
      const float ms = MedianMs(
          stream, 20,
          [&] {
            absl::Status s = strata::kernels::LaunchPagedDecodeAttention({q, kv, batch, heads, 0.088f, context, ws,
                                                                        out, lse}, stream);
            if (!s.ok()) {
              std::fprintf(stderr, "%s\n", s.ToString().c_str());
              std::exit(1);
            }
          },
          flush);
      const double bytes = 2.0 * batch * context * kv_heads * head_dim * 2;  // K and V, bf16
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      const double same_gbps = ceiling.Gbps(static_cast<size_t>(bytes / 2));  // reads + writes `bytes`
      std::printf("| %d | %lld | %.0f | %.3f | %.0f | %.2f | %.0f | %.2f |\n", batch, static_cast<long long>(context),
                  bytes / 1e6, ms, gbps, gbps / big_copy_gbps, same_gbps, gbps / same_gbps);
      for (void* p : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(indptr),
                      static_cast<void*>(indices), static_cast<void*>(last), static_cast<void*>(q),
                      static_cast<void*>(out), static_cast<void*>(lse), static_cast<void*>(ws)}) {
        CHECK_CUDA(cudaFree(p));
      }
    }
  }
  return 0;
}
