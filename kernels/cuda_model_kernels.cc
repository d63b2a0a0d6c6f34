#include "kernels/cuda_model_kernels.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/cuda_model_launch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

namespace {

absl::Status Sizes(int64_t a, int64_t b = 0, int64_t c = 0) {
  if (a < 0 || b < 0 || c < 0) return absl::InvalidArgumentError("negative kernel size");
  return absl::OkStatus();
}

absl::Status HeadDim(int head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > 256) {
    return absl::InvalidArgumentError("head_dim must be even and in 2..256");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchEmbedBf16(const uint16_t* table, const int32_t* ids, int rows, int dim, float* out,
                             cudaStream_t stream) {
  if (absl::Status s = Sizes(rows, dim); !s.ok()) return s;
  if (rows == 0 || dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::EmbedBf16Async(table, ids, rows, dim, out, stream));
  return absl::OkStatus();
}

absl::Status LaunchRmsNormToBf16(const float* add, float* x, const float* weight, uint16_t* y, int rows, int dim,
                                 float eps, cudaStream_t stream) {
  if (absl::Status s = Sizes(rows, dim); !s.ok()) return s;
  if (rows == 0 || dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::RmsNormToBf16Async(add, x, weight, y, rows, dim, eps, stream));
  return absl::OkStatus();
}

absl::Status LaunchSwiGluToBf16(const float* gate_up, uint16_t* out, int rows, int ffn, cudaStream_t stream) {
  if (absl::Status s = Sizes(rows, ffn); !s.ok()) return s;
  if (rows == 0 || ffn == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::SwiGluToBf16Async(gate_up, out, rows, ffn, stream));
  return absl::OkStatus();
}

absl::Status LaunchToBf16(const float* x, uint16_t* out, int64_t n, cudaStream_t stream) {
  if (absl::Status s = Sizes(n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::ToBf16Async(x, out, n, stream));
  return absl::OkStatus();
}

absl::Status LaunchQkvRopePlace(const QkvPlaceParams& p, cudaStream_t stream) {
  if (absl::Status s = Sizes(p.rows, p.num_heads, p.kv_heads); !s.ok()) return s;
  if (absl::Status s = HeadDim(p.head_dim); !s.ok()) return s;
  if (p.num_heads + p.kv_heads > 65535) return absl::InvalidArgumentError("more than 65535 heads");
  if (p.rows == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::QkvRopePlaceAsync(p, stream));
  return absl::OkStatus();
}

absl::Status LaunchPlaceStoredKv(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream) {
  if (absl::Status s = Sizes(p.n, p.layers, p.kv_heads); !s.ok()) return s;
  if (absl::Status s = HeadDim(p.head_dim); !s.ok()) return s;
  if (p.n > p.chunk_tokens || p.layers > 65535) return absl::InvalidArgumentError("more rows than the chunk holds");
  if (p.n == 0 || p.layers == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::PlaceStoredKvAsync(stored, p, stream));
  return absl::OkStatus();
}

absl::Status LaunchGatherStoredKv(const StoredKvParams& p, uint16_t* stored, cudaStream_t stream) {
  if (absl::Status s = Sizes(p.n, p.layers, p.kv_heads); !s.ok()) return s;
  if (absl::Status s = HeadDim(p.head_dim); !s.ok()) return s;
  if (p.n > p.chunk_tokens || p.layers > 65535) return absl::InvalidArgumentError("more rows than the chunk holds");
  if (p.n == 0 || p.layers == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::GatherStoredKvAsync(p, stored, stream));
  return absl::OkStatus();
}

absl::Status LaunchGatherRowsBf16(const uint16_t* in, const int32_t* rows, int n, int dim, uint16_t* out,
                                  cudaStream_t stream) {
  if (absl::Status s = Sizes(n, dim); !s.ok()) return s;
  if (n == 0 || dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::GatherRowsBf16Async(in, rows, n, dim, out, stream));
  return absl::OkStatus();
}

absl::Status LaunchSample(const float* logits, int rows, int vocab, const float* temperature, const float* top_p,
                          const double* u, int32_t* ids, cudaStream_t stream) {
  if (absl::Status s = Sizes(rows, vocab); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  if (vocab == 0) return absl::InvalidArgumentError("sampling from an empty vocabulary");
  STRATA_CUDA_RETURN_IF_ERROR(internal::SampleAsync(logits, rows, vocab, temperature, top_p, u, ids, stream));
  return absl::OkStatus();
}

absl::Status LaunchFillRandomBf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (absl::Status s = Sizes(n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::FillRandomBf16Async(out, n, seed, scale, stream));
  return absl::OkStatus();
}

absl::Status LaunchFillF32(float* out, int64_t n, float value, cudaStream_t stream) {
  if (absl::Status s = Sizes(n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::FillF32Async(out, n, value, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

namespace {
absl::Status NoCuda() { return absl::UnimplementedError("strata was built without CUDA"); }
}  // namespace

absl::Status LaunchEmbedBf16(const uint16_t*, const int32_t*, int, int, float*, cudaStream_t) { return NoCuda(); }
absl::Status LaunchRmsNormToBf16(const float*, float*, const float*, uint16_t*, int, int, float, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchSwiGluToBf16(const float*, uint16_t*, int, int, cudaStream_t) { return NoCuda(); }
absl::Status LaunchToBf16(const float*, uint16_t*, int64_t, cudaStream_t) { return NoCuda(); }
absl::Status LaunchQkvRopePlace(const QkvPlaceParams&, cudaStream_t) { return NoCuda(); }
absl::Status LaunchPlaceStoredKv(const uint16_t*, const StoredKvParams&, cudaStream_t) { return NoCuda(); }
absl::Status LaunchGatherStoredKv(const StoredKvParams&, uint16_t*, cudaStream_t) { return NoCuda(); }
absl::Status LaunchGatherRowsBf16(const uint16_t*, const int32_t*, int, int, uint16_t*, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchSample(const float*, int, int, const float*, const float*, const double*, int32_t*, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchFillRandomBf16(uint16_t*, int64_t, uint64_t, float, cudaStream_t) { return NoCuda(); }
absl::Status LaunchFillF32(float*, int64_t, float, cudaStream_t) { return NoCuda(); }

#endif

}  // namespace strata::kernels
