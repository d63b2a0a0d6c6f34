#include "kernels/rope/rope.h"

#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/cuda_check.h"
#include "kernels/rope/rope_launch.h"
#endif

namespace strata::kernels {

using internal::CheckSizes;

#if defined(STRATA_WITH_CUDA)

namespace {

absl::Status HeadDim(int head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > 256) {
    return absl::InvalidArgumentError("head_dim must be even and in 2..256");
  }
  return absl::OkStatus();
}

// The checks PlaceStoredKv and GatherStoredKv share.
absl::Status CheckStoredKv(const StoredKvParams& p) {
  if (absl::Status s = CheckSizes(p.n, p.layers, p.kv_heads); !s.ok()) return s;
  if (absl::Status s = HeadDim(p.head_dim); !s.ok()) return s;
  if (p.n > p.chunk_tokens || p.layers > 65535) return absl::InvalidArgumentError("more rows than the chunk holds");
  if (p.stored_block_stride != 0 && p.stored_block_stride < int64_t{2} * p.chunk_tokens * p.kv_heads * p.head_dim) {
    return absl::InvalidArgumentError("stored blocks overlap");
  }
  if (p.index_stride != 0 && p.index_stride < p.n) {
    return absl::InvalidArgumentError("index_stride must be 0 or at least n");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchApplyRope(const ApplyRopeParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.heads, p.head_dim); !s.ok()) return s;
  if (p.head_dim % 2 != 0) return absl::InvalidArgumentError("ApplyRope needs an even head_dim");
  if (p.rows == 0 || p.heads == 0 || p.head_dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(
      internal::ApplyRopeAsync(p.x, p.positions, p.rows, p.heads, p.head_dim, p.inv_freq, stream));
  return absl::OkStatus();
}

absl::Status LaunchPlaceKvPaged(const PlaceKvPagedParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.n, p.kv_heads, p.head_dim); !s.ok()) return s;
  if (p.head_dim % 2 != 0) return absl::InvalidArgumentError("head_dim must be even");
  if (p.n == 0 || p.kv_heads == 0 || p.head_dim == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::PlaceKvPagedAsync(p.k_raw, p.v, p.positions, p.slots, p.n, p.kv_heads,
                                                          p.head_dim, p.inv_freq, p.k_pages, p.v_pages, stream));
  return absl::OkStatus();
}

absl::Status LaunchQkvRopePlace(const QkvPlaceParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckSizes(p.rows, p.num_heads, p.kv_heads); !s.ok()) return s;
  if (absl::Status s = HeadDim(p.head_dim); !s.ok()) return s;
  if (p.num_heads + p.kv_heads > 65535) return absl::InvalidArgumentError("more than 65535 heads");
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) {
    return absl::InvalidArgumentError("QkvRopePlace takes both q and k norms or neither");
  }
  if (p.rows == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::QkvRopePlaceAsync(p, stream));
  return absl::OkStatus();
}

absl::Status LaunchPlaceStoredKv(const uint16_t* stored, const StoredKvParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckStoredKv(p); !s.ok()) return s;
  if (p.n == 0 || p.layers == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(internal::PlaceStoredKvAsync(stored, p, stream));
  return absl::OkStatus();
}

absl::Status LaunchGatherStoredKv(const StoredKvParams& p, uint16_t* stored, cudaStream_t stream, int max_blocks) {
  if (absl::Status s = CheckStoredKv(p); !s.ok()) return s;
  if (p.index_stride != 0 || p.stored_block_stride != 0) {
    return absl::InvalidArgumentError("GatherStoredKv takes no index or block stride");
  }
  if (p.n == 0 || p.layers == 0) return absl::OkStatus();
  if (max_blocks < 0) return absl::InvalidArgumentError("GatherStoredKv: max_blocks must be >= 0");
  STRATA_CUDA_RETURN_IF_ERROR(internal::GatherStoredKvAsync(p, stored, max_blocks, stream));
  return absl::OkStatus();
}

absl::Status LaunchGatherStoredKvChunks(const StoredChunksParams& p, cudaStream_t stream, int max_blocks) {
  if (absl::Status s = CheckSizes(p.chunks, p.layers, p.kv_heads); !s.ok()) return s;
  if (absl::Status s = HeadDim(p.head_dim); !s.ok()) return s;
  if (p.chunk_tokens < 0) return absl::InvalidArgumentError("GatherStoredKvChunks: negative chunk_tokens");
  if (max_blocks < 0) return absl::InvalidArgumentError("GatherStoredKvChunks: max_blocks must be >= 0");
  if (p.chunks == 0 || p.layers == 0 || p.chunk_tokens == 0) return absl::OkStatus();
  if (p.records == nullptr) return absl::InvalidArgumentError("GatherStoredKvChunks: no records");
  STRATA_CUDA_RETURN_IF_ERROR(internal::GatherStoredKvChunksAsync(p, max_blocks, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

absl::Status LaunchApplyRope(const ApplyRopeParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchPlaceKvPaged(const PlaceKvPagedParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchQkvRopePlace(const QkvPlaceParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchPlaceStoredKv(const uint16_t*, const StoredKvParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchGatherStoredKv(const StoredKvParams&, uint16_t*, cudaStream_t, int) { return internal::NoCuda(); }
absl::Status LaunchGatherStoredKvChunks(const StoredChunksParams&, cudaStream_t, int) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
