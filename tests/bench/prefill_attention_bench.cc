// Paged prefill attention on the GPU: the tensor-core kernel (LaunchPagedPrefillAttentionTc)
// against the ceiling measured in the same run (a cuBLAS bf16 GEMM of 8192^3 through
// LaunchMatMulBf16) and against the CUDA-core kernel it replaces (LaunchPagedPrefillAttention),
// on Llama-3-8B attention shapes (32 query heads, 8 KV heads of 128, bf16 KV in 16-token
// pages): one sequence of 512, 2K and 8K new tokens, and 4 sequences of 2K new tokens after
// 2K cached ones. FLOPs are the causal ones: 4 * head_dim * (visible keys summed over new
// rows) per query head. Each row also says how far the tensor-core output is from the fp32
// CUDA-core one (||a - b|| / ||b||), and the time of each query-tile form the kernel has
// (rows per block / warps / K-V tile keys); the entry point picks one from the shape.
// tests/bench/attention_torch_ref.py times PyTorch's scaled_dot_product_attention on the
// same shapes.
//
//   build/tests/bench/prefill_attention_bench     (needs a CUDA device; says so otherwise)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/attention/decode.h"
#include "kernels/attention/prefill.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/gemm/gemm.h"
#include "kernels/testing/paged_pool.h"
#include "tests/bench/cuda_bench.h"

namespace {

using strata::bench::MedianMs;
using strata::bench::Upload;

void CheckOk(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

uint16_t* DeviceRandomBf16(size_t n) {
  std::vector<uint16_t> h(n);
  uint32_t s = 12345;
  for (uint16_t& v : h) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(0x3c00 | (s >> 22 & 0x7f) | (s >> 31) << 15);  // +-[2^-7, 2^-6)
  }
  return Upload(h);
}

double RelativeDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    r += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(e / std::max(r, 1e-30));
}

}  // namespace

int main() {
  namespace sk = strata::kernels;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: prefill_attention_bench needs a GPU (skipped)\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  // Ceiling: cuBLAS bf16 GEMM, 8192^3, fp32 out.
  const int n = 8192;
  uint16_t* ga = DeviceRandomBf16(size_t{1} * n * n);
  uint16_t* gb = DeviceRandomBf16(size_t{1} * n * n);
  float* gc = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&gc), size_t{4} * n * n));
  const float gemm_ms = MedianMs(stream, 10, [&] { CheckOk(sk::LaunchMatMulBf16({ga, gb, gc, n, n, n}, stream)); });
  const double gemm_tflops = 2.0 * n * n * static_cast<double>(n) / (gemm_ms * 1e-3) / 1e12;
  CHECK_CUDA(cudaFree(ga));
  CHECK_CUDA(cudaFree(gb));
  CHECK_CUDA(cudaFree(gc));
  std::printf("%s, %d SMs; cuBLAS bf16 GEMM 8192^3: %.0f TFLOP/s\n\n", prop.name, prop.multiProcessorCount,
              gemm_tflops);
  std::printf(
      "| sequences x new (cached) | GFLOP | TC ms | TC TFLOP/s | vs cuBLAS | 64/4/64 ms | 128/8/64 ms | 128/4/32 ms | "
      "128/4/64 ms | wgmma, warp-specialised: ms, TFLOP/s | CUDA-core ms | TC speedup | TC vs CUDA-core |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

  struct Shape {
    int sequences, new_tokens, cached;
  };
  const int kv_heads = 8, heads = 32, head_dim = 128, page = 16;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (const Shape& shape : {Shape{1, 512, 0}, Shape{1, 2048, 0}, Shape{1, 8192, 0}, Shape{4, 2048, 2048}}) {
    const int len = shape.new_tokens + shape.cached;
    const std::vector<int64_t> lengths(static_cast<size_t>(shape.sequences), len);
    const auto pool = sk::test_support::RandomPagedPool(lengths, page, kv_heads, head_dim, 7);
    const int rows = shape.sequences * shape.new_tokens;
    std::vector<int32_t> qo_indptr;
    for (int b = 0; b <= shape.sequences; ++b) qo_indptr.push_back(b * shape.new_tokens);
    std::vector<float> qh(static_cast<size_t>(rows) * heads * head_dim);
    uint32_t s = 99;
    for (float& x : qh) {
      s = s * 1664525u + 1013904223u;
      x = static_cast<float>(s >> 8) / static_cast<float>(1 << 23) - 1.0f;  // uniform [-1, 1)
    }
    uint16_t* k = Upload(pool.k);
    uint16_t* v = Upload(pool.v);
    int32_t* indptr = Upload(pool.indptr);
    int32_t* indices = Upload(pool.indices);
    int32_t* last = Upload(pool.last_page_len);
    int32_t* qo = Upload(qo_indptr);
    float* q = Upload(qh);
    float *out_tc = nullptr, *out_cc = nullptr, *lse = nullptr, *ws = nullptr;
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out_tc), qh.size() * sizeof(float)));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out_cc), qh.size() * sizeof(float)));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&lse), static_cast<size_t>(rows) * heads * sizeof(float)));
    const int64_t ws_floats = sk::DecodeWorkspaceFloats(rows, heads, head_dim, len);
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&ws), std::max<int64_t>(1, ws_floats) * sizeof(float)));
    const sk::PagedKv kv{k, v, page, kv_heads, head_dim, indptr, indices, last};

    double visible = 0;  // keys seen, summed over new rows (per head)
    for (int i = 0; i < shape.new_tokens; ++i) visible += shape.cached + i + 1;
    visible *= shape.sequences;
    const double flops = 4.0 * head_dim * heads * visible;

    const float tc_ms = MedianMs(stream, 20, [&] {
      CheckOk(sk::LaunchPagedPrefillAttentionTc({q, kv, qo, shape.sequences, rows, heads, scale, shape.new_tokens,
                                                out_tc, lse}, stream));
    });
    using Tiles = sk::internal::PrefillTcTiles;
    const Tiles forms[] = {Tiles::k64Rows4Warps, Tiles::k128Rows8Warps, Tiles::k128Rows4Warps,
                           Tiles::k128Rows4Warps64Keys};
    float tile_ms[4];
    for (int t = 0; t < 4; ++t) {
      sk::internal::PrefillTcParams p{q,     k,        v,     indptr,     indices, last,    qo,
                                      page,  kv_heads, head_dim, heads, shape.sequences, shape.new_tokens,
                                      scale, out_tc,   lse};
      tile_ms[t] = MedianMs(stream, 20, [&] {
        CHECK_CUDA(sk::internal::PagedPrefillAttentionTcAsync(p, forms[t], stream));
      });
    }
    // The Hopper form (sm_90a: prefill_wgmma_ws.cu), where the device has it.
    float ws_ms = 0.0f;
    if (sk::internal::PrefillWgmmaSupported(head_dim)) {
      const sk::internal::PrefillTcParams p{q,     k,        v,     indptr,     indices, last,    qo,
                                            page,  kv_heads, head_dim, heads, shape.sequences, shape.new_tokens,
                                            scale, out_tc,   lse};
      ws_ms = MedianMs(stream, 20, [&] { CHECK_CUDA(sk::internal::PagedPrefillAttentionWgmmaWsAsync(p, stream)); });
    }
    const float cc_ms = MedianMs(stream, 3, [&] {
      CheckOk(sk::LaunchPagedPrefillAttention({q, kv, qo, shape.sequences, rows, heads, scale, len, ws, out_cc,
                                              nullptr}, stream));
    });
    // The checked output: the entry point's own choice, last written by a tile variant,
    // so run it once more.
    CheckOk(sk::LaunchPagedPrefillAttentionTc({q, kv, qo, shape.sequences, rows, heads, scale, shape.new_tokens,
                                              out_tc, lse}, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<float> a(qh.size()), b(qh.size());
    CHECK_CUDA(cudaMemcpy(a.data(), out_tc, a.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(b.data(), out_cc, b.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const double tflops = flops / (tc_ms * 1e-3) / 1e12;
    std::printf(
        "| %d x %d (%d) | %.1f | %.3f | %.0f | %.2f | %.3f | %.3f | %.3f | %.3f | %.3f, %.0f | %.2f | %.0fx | %.1e |\n",
        shape.sequences, shape.new_tokens, shape.cached, flops / 1e9, tc_ms, tflops, tflops / gemm_tflops, tile_ms[0],
        tile_ms[1], tile_ms[2], tile_ms[3], ws_ms, ws_ms > 0 ? flops / (ws_ms * 1e-3) / 1e12 : 0.0, cc_ms,
        cc_ms / tc_ms, RelativeDistance(a, b));
    for (void* ptr : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(indptr),
                      static_cast<void*>(indices), static_cast<void*>(last), static_cast<void*>(qo),
                      static_cast<void*>(q), static_cast<void*>(out_tc), static_cast<void*>(out_cc),
                      static_cast<void*>(lse), static_cast<void*>(ws)}) {
      CHECK_CUDA(cudaFree(ptr));
    }
  }
  return 0;
}
