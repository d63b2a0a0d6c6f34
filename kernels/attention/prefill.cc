#include "kernels/attention/prefill.h"

#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention/decode_parts.h"
#include "kernels/attention/merge_launch.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

namespace {

bool AlignedTo(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The split's output parts; their lse follow.
int64_t PartFloats(const PrefillSplitShape& s, int splits) {
  return internal::Align4Floats(int64_t{s.rows} * splits * s.num_heads * s.head_dim);
}

}  // namespace

bool internal::PrefillWgmmaSupported(int head_dim) {
  return (head_dim == 64 || head_dim == 128) && CurrentDeviceComputeCapability() == 90;
}

int PrefillKeySplits(const PrefillSplitShape& s) {
  if (s.batch <= 0 || s.rows <= 0 || s.max_new_tokens <= 0 || s.kv_heads <= 0 || s.num_heads % s.kv_heads != 0) {
    return 1;
  }
  const int group = s.num_heads / s.kv_heads, subgroup = GqaSubgroupSize(group);
  if (subgroup == 0) return 1;
  const int64_t per_tile = int64_t{s.kv_heads} * (group / subgroup) * s.batch;
  const int64_t sms = CurrentDeviceSmCount();
  // PagedPrefillAttentionTcAsync's own rule: 128-row tiles already give every SM two blocks.
  if ((int64_t{s.max_new_tokens} * subgroup + 127) / 128 * per_tile >= 2 * sms) return 1;
  const int64_t blocks = (int64_t{s.max_new_tokens} * subgroup + 63) / 64 * per_tile;
  const int64_t want = (2 * sms + blocks - 1) / blocks;
  const int64_t most = std::min<int64_t>(kPrefillMaxKeySplits, s.max_keys / kPrefillMinSplitKeys);
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::max<int64_t>(1, most)));
}

namespace {

// Parts along the keys for the Hopper form (128-row tiles, 64-key tiles, one block an SM):
// whole rounds of the SMs (decode_parts.h), at most `most` (PrefillKeySplits', which the
// workspace is sized for).
int WgmmaKeySplits(const PrefillSplitShape& s, int most) {
  if (most <= 1) return 1;
  const int group = s.num_heads / s.kv_heads, subgroup = GqaSubgroupSize(group);
  const int64_t blocks = (int64_t{s.max_new_tokens} * subgroup + 127) / 128 * s.kv_heads * (group / subgroup) * s.batch;
  return WholeRoundParts(blocks, CurrentDeviceSmCount(), (s.max_keys + 63) / 64, most);
}

}  // namespace

int64_t PrefillAttentionWorkspaceFloats(const PrefillSplitShape& s) {
  const int splits = PrefillKeySplits(s);
  if (splits <= 1) return 0;
  return PartFloats(s, splits) + int64_t{s.rows} * splits * s.num_heads;
}

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
  internal::PrefillTcParams p = internal::ToTcParams(params);
  const PrefillSplitShape shape{batch, rows, max_new_tokens, num_heads, kv.kv_heads, kv.head_dim, params.max_keys};
  // On Hopper the warp-specialised wgmma form: 1.3-1.7x the mma.sync forms' rate
  // (docs/BENCHMARKS.md), split by its own rule within the workspace's parts.
  const bool hopper = internal::PrefillWgmmaSupported(kv.head_dim);
  int splits = params.workspace != nullptr ? PrefillKeySplits(shape) : 1;
  if (hopper) splits = WgmmaKeySplits(shape, splits);
  // The mma.sync forms: the entry point's own choice unsplit, the 64-row blocks its split
  // rule was measured for when split.
  auto launch = [&](internal::PrefillTcTiles tiles) {
    return hopper ? internal::PagedPrefillAttentionWgmmaWsAsync(p, stream)
                  : internal::PagedPrefillAttentionTcAsync(p, tiles, stream);
  };
  if (splits <= 1) {
    STRATA_CUDA_RETURN_IF_ERROR(launch(internal::PrefillTcTiles::kAuto));
    return absl::OkStatus();
  }
  if (!AlignedTo(params.workspace, 16)) {
    return absl::InvalidArgumentError("prefill attention's workspace must be 16-byte aligned");
  }
  p.key_splits = splits;
  p.ws_o = params.workspace;
  p.ws_lse = params.workspace + PartFloats(shape, splits);
  STRATA_CUDA_RETURN_IF_ERROR(launch(internal::PrefillTcTiles::k64Rows4Warps));
  STRATA_CUDA_RETURN_IF_ERROR(
      internal::MergeStatesAsync(p.ws_o, p.ws_lse, splits, rows, num_heads, kv.head_dim, out, params.lse, stream));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

absl::Status LaunchPagedPrefillAttentionTc(const PrefillAttentionTcParams&, cudaStream_t) { return internal::NoCuda(); }
int PrefillKeySplits(const PrefillSplitShape&) { return 1; }
int64_t PrefillAttentionWorkspaceFloats(const PrefillSplitShape&) { return 0; }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
