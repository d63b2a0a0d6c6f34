#include "kernels/cuda_prefill_attention.h"

#if defined(STRATA_WITH_CUDA)
#include <cmath>
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/cuda_prefill_attention_launch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

namespace {

bool AlignedTo(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

absl::Status LaunchPagedPrefillAttentionTc(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch,
                                           int rows, int num_heads, float scale, int max_new_tokens, float* out,
                                           float* lse, cudaStream_t stream) {
  if (batch < 0 || rows < 0 || num_heads < 0 || max_new_tokens < 0) {
    return absl::InvalidArgumentError("negative prefill attention size");
  }
  if (kv.head_dim != 64 && kv.head_dim != 128) {
    return absl::InvalidArgumentError("prefill attention takes head_dim 64 or 128");
  }
  const int group = kv.kv_heads > 0 && num_heads % kv.kv_heads == 0 ? num_heads / kv.kv_heads : 0;
  if (group != 1 && group != 2 && group != 4 && group != 8) {
    return absl::InvalidArgumentError("prefill attention needs 1, 2, 4 or 8 query heads per KV head");
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
  internal::PrefillTcParams p{};
  p.q = q;
  p.k_pages = kv.k_pages;
  p.v_pages = kv.v_pages;
  p.indptr = kv.indptr;
  p.indices = kv.indices;
  p.last_page_len = kv.last_page_len;
  p.qo_indptr = qo_indptr;
  p.page_size = kv.page_size;
  p.kv_heads = kv.kv_heads;
  p.head_dim = kv.head_dim;
  p.num_heads = num_heads;
  p.batch = batch;
  p.max_new_tokens = max_new_tokens;
  p.scale = scale;
  p.out = out;
  p.lse = lse;
  STRATA_CUDA_RETURN_IF_ERROR(internal::PagedPrefillAttentionTcAsync(p, internal::PrefillTcTiles::kAuto, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

absl::Status LaunchPagedPrefillAttentionTc(const float*, const PagedKv&, const int32_t*, int, int, int, float, int,
                                           float*, float*, cudaStream_t) {
  return absl::UnimplementedError("strata was built without CUDA");
}

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
