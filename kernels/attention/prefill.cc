#include "kernels/attention/prefill.h"

#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include <cmath>
#include <cstdint>

#include "kernels/attention/prefill_launch.h"
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

namespace {

bool AlignedTo(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

internal::PrefillTcParams internal::ToTcParams(const PrefillAttentionTcParams& params) {
  internal::PrefillTcParams p{};
  p.q = params.q;
  p.k_pages = params.kv.k_pages;
  p.v_pages = params.kv.v_pages;
  p.indptr = params.kv.indptr;
  p.indices = params.kv.indices;
  p.last_page_len = params.kv.last_page_len;
  p.qo_indptr = params.qo_indptr;
  p.page_size = params.kv.page_size;
  p.kv_heads = params.kv.kv_heads;
  p.head_dim = params.kv.head_dim;
  p.num_heads = params.num_heads;
  p.batch = params.batch;
  p.max_new_tokens = params.max_new_tokens;
  p.scale = params.scale;
  p.out = params.out;
  p.lse = params.lse;
  p.all_keys = params.all_keys;
  return p;
}

absl::Status LaunchPagedPrefillAttentionTc(const PrefillAttentionTcParams& params, cudaStream_t stream) {
  const float* q = params.q;
  const PagedKv& kv = params.kv;
  const int batch = params.batch, rows = params.rows, num_heads = params.num_heads;
  const int max_new_tokens = params.max_new_tokens;
  const float scale = params.scale;
  float* out = params.out;
  if (batch < 0 || rows < 0 || num_heads < 0 || max_new_tokens < 0) {
    return absl::InvalidArgumentError("negative prefill attention size");
  }
  if (!IsDispatchedHeadDim(kv.head_dim)) {
    return absl::InvalidArgumentError("prefill attention takes head_dim 64, 80, 96, 128 or 256");
  }
  if (!IsDispatchedGqaGroupSize(GqaGroupSize(num_heads, kv.kv_heads))) {
    return absl::InvalidArgumentError("prefill attention needs 1 to 64 query heads per KV head (a divisor of the heads)");
  }
  if (kv.page_size <= 0) return absl::InvalidArgumentError("prefill attention needs page_size > 0");
  if (!(scale > 0.0f) || std::isinf(scale)) return absl::InvalidArgumentError("prefill attention needs 0 < scale < inf");
  if (batch > 65535 || kv.kv_heads > 65535) {
    return absl::InvalidArgumentError("prefill attention takes at most 65535 sequences and KV heads");
  }
  if (!AlignedTo(q, 16) || !AlignedTo(kv.k_pages, 16) || !AlignedTo(kv.v_pages, 16) || !AlignedTo(out, 8)) {
    return absl::InvalidArgumentError("prefill attention needs q, k_pages, v_pages 16-byte and out 8-byte aligned");
  }
  if (batch == 0 || rows == 0 || max_new_tokens == 0) return absl::OkStatus();
  const internal::PrefillTcParams p = internal::ToTcParams(params);
  STRATA_CUDA_RETURN_IF_ERROR(internal::PagedPrefillAttentionTcAsync(p, internal::PrefillTcTiles::kAuto, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

absl::Status LaunchPagedPrefillAttentionTc(const PrefillAttentionTcParams&, cudaStream_t) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
