#include "kernels/cuda_kernels.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/cuda_launch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

namespace {

absl::Status CheckSizes(int64_t a, int64_t b = 0, int64_t c = 0) {
  if (a < 0 || b < 0 || c < 0) return absl::InvalidArgumentError("negative kernel size");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchRmsNorm(const float* x, const float* weight, float* y, int rows, int dim,
                           float eps, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(rows, dim); !s.ok()) return s;
  if (rows == 0 || dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::RmsNormAsync(x, weight, y, rows, dim, eps, stream));
  return absl::OkStatus();
}

absl::Status LaunchArgmax(const float* logits, int rows, int vocab, int32_t* ids, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(rows, vocab); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  if (vocab == 0) return absl::InvalidArgumentError("argmax over an empty vocabulary");
  STRATA_CUDA_RETURN_IF_ERROR(internal::ArgmaxAsync(logits, rows, vocab, ids, stream));
  return absl::OkStatus();
}

absl::Status LaunchAddRmsNorm(const float* x, float* residual, const float* weight, float* y, int rows, int dim,
                              float eps, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(rows, dim); !s.ok()) return s;
  if (rows == 0 || dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::AddRmsNormAsync(x, residual, weight, y, rows, dim, eps, stream));
  return absl::OkStatus();
}

absl::Status LaunchSwiGlu(const float* gate, const float* up, float* out, int64_t n,
                          cudaStream_t stream) {
  if (absl::Status s = CheckSizes(n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::SwiGluAsync(gate, up, out, n, stream));
  return absl::OkStatus();
}

absl::Status LaunchEmbed(const float* table, const int32_t* ids, int rows, int dim, float* out,
                         cudaStream_t stream) {
  if (absl::Status s = CheckSizes(rows, dim); !s.ok()) return s;
  if (rows == 0 || dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::EmbedAsync(table, ids, rows, dim, out, stream));
  return absl::OkStatus();
}

absl::Status LaunchApplyRope(float* x, const int32_t* positions, int rows, int heads, int head_dim,
                             const float* inv_freq, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(rows, heads, head_dim); !s.ok()) return s;
  if (head_dim % 2 != 0) return absl::InvalidArgumentError("ApplyRope needs an even head_dim");
  if (rows == 0 || heads == 0 || head_dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(
      internal::ApplyRopeAsync(x, positions, rows, heads, head_dim, inv_freq, stream));
  return absl::OkStatus();
}

absl::Status LaunchPlaceKvPaged(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots,
                                int n, int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages,
                                uint16_t* v_pages, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(n, kv_heads, head_dim); !s.ok()) return s;
  if (head_dim % 2 != 0) return absl::InvalidArgumentError("head_dim must be even");
  if (n == 0 || kv_heads == 0 || head_dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::PlaceKvPagedAsync(k_raw, v, positions, slots, n, kv_heads, head_dim, inv_freq,
                                                          k_pages, v_pages, stream));
  return absl::OkStatus();
}

namespace {

// The device's multiprocessor count (132 on an H100 SXM if it cannot be read; the launch
// that follows reports the error).
int SmCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    (void)cudaGetLastError();
    return 132;
  }
  return sms;
}

struct DecodeSplit {
  int parts;
  int part_tokens;
};

// Parts per sequence for `blocks_per_part` blocks (rows x KV heads) of one part each:
// enough parts that the launch has kDecodeBlocksPerSm blocks per SM, none shorter than
// kDecodePartAlign tokens, each a multiple of it. Fewer rows or KV heads never give fewer
// parts, so the workspace bound (KV heads = 1) holds for every launch.
DecodeSplit ChooseDecodeSplit(int64_t blocks_per_part, int64_t max_tokens, int sm_count) {
  const int64_t tokens = std::max<int64_t>(1, max_tokens);
  const int64_t want_blocks = int64_t{kDecodeBlocksPerSm} * sm_count;
  int64_t parts = (want_blocks + blocks_per_part - 1) / std::max<int64_t>(1, blocks_per_part);
  parts = std::clamp<int64_t>(parts, 1, (tokens + kDecodePartAlign - 1) / kDecodePartAlign);
  int64_t part_tokens = (tokens + parts - 1) / parts;
  part_tokens = (part_tokens + kDecodePartAlign - 1) / kDecodePartAlign * kDecodePartAlign;
  return DecodeSplit{static_cast<int>((tokens + part_tokens - 1) / part_tokens), static_cast<int>(part_tokens)};
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

absl::Status LaunchPagedAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch, int rows,
                                  int num_heads, float scale, int64_t max_tokens, float* workspace, float* out,
                                  float* lse, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(batch, rows, max_tokens); !s.ok()) return s;
  if (kv.head_dim != 64 && kv.head_dim != 128) {
    return absl::InvalidArgumentError("paged attention takes head_dim 64 or 128");
  }
  const int group = kv.kv_heads > 0 && num_heads % kv.kv_heads == 0 ? num_heads / kv.kv_heads : 0;
  if ((group != 1 && group != 2 && group != 4 && group != 8) || kv.page_size <= 0) {
    return absl::InvalidArgumentError("paged attention needs 1, 2, 4 or 8 query heads per KV head");
  }
  if (!Aligned16(q) || !Aligned16(kv.k_pages) || !Aligned16(kv.v_pages)) {
    return absl::InvalidArgumentError("paged attention needs q, k_pages and v_pages 16-byte aligned");
  }
  if (batch == 0 || rows == 0 || num_heads == 0) return absl::OkStatus();
  if (max_tokens > std::numeric_limits<int32_t>::max()) return absl::InvalidArgumentError("max_tokens too large");
  const DecodeSplit split = ChooseDecodeSplit(int64_t{rows} * kv.kv_heads, max_tokens, SmCount());
  float* ws_o = workspace;
  float* ws_lse = workspace + int64_t{split.parts} * rows * num_heads * kv.head_dim;
  STRATA_CUDA_RETURN_IF_ERROR(internal::PagedDecodeAttentionAsync(
      q, kv.k_pages, kv.v_pages, kv.page_size, kv.kv_heads, kv.head_dim, kv.indptr, kv.indices, kv.last_page_len,
      qo_indptr, batch, rows, num_heads, scale, split.parts, split.part_tokens, ws_o, ws_lse, out, lse, stream));
  return absl::OkStatus();
}

}  // namespace

int64_t DecodeWorkspaceFloats(int batch, int num_heads, int head_dim, int64_t max_tokens) {
  if (batch <= 0 || num_heads <= 0 || head_dim <= 0) return 0;
  const DecodeSplit split = ChooseDecodeSplit(batch, max_tokens, SmCount());
  return int64_t{split.parts} * batch * num_heads * (int64_t{head_dim} + 1);
}

absl::Status LaunchPagedDecodeAttention(const float* q, const PagedKv& kv, int batch, int num_heads, float scale,
                                        int64_t max_tokens, float* workspace, float* out, float* lse,
                                        cudaStream_t stream) {
  return LaunchPagedAttention(q, kv, nullptr, batch, batch, num_heads, scale, max_tokens, workspace, out, lse, stream);
}

absl::Status LaunchPagedPrefillAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch,
                                         int rows, int num_heads, float scale, int64_t max_tokens, float* workspace,
                                         float* out, float* lse, cudaStream_t stream) {
  return LaunchPagedAttention(q, kv, qo_indptr, batch, rows, num_heads, scale, max_tokens, workspace, out, lse,
                              stream);
}

#else  // !STRATA_WITH_CUDA

namespace {

absl::Status NoCuda() { return absl::UnimplementedError("strata was built without CUDA"); }

}  // namespace

absl::Status LaunchRmsNorm(const float*, const float*, float*, int, int, float, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchSwiGlu(const float*, const float*, float*, int64_t, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchAddRmsNorm(const float*, float*, const float*, float*, int, int, float, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchArgmax(const float*, int, int, int32_t*, cudaStream_t) { return NoCuda(); }
absl::Status LaunchEmbed(const float*, const int32_t*, int, int, float*, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchApplyRope(float*, const int32_t*, int, int, int, const float*, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchPlaceKvPaged(const float*, const float*, const int32_t*, const int64_t*, int, int, int,
                                const float*, uint16_t*, uint16_t*, cudaStream_t) {
  return NoCuda();
}
int64_t DecodeWorkspaceFloats(int, int, int, int64_t) { return 0; }
absl::Status LaunchPagedPrefillAttention(const float*, const PagedKv&, const int32_t*, int, int, int, float, int64_t,
                                         float*, float*, float*, cudaStream_t) {
  return NoCuda();
}
absl::Status LaunchPagedDecodeAttention(const float*, const PagedKv&, int, int, float, int64_t, float*, float*, float*,
                                        cudaStream_t) {
  return NoCuda();
}

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
