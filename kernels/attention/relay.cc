#include "kernels/attention/relay.h"

#include <algorithm>

#include "kernels/attention/decode.h"
#include "kernels/attention/prefill.h"
#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/attention/merge_launch.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

namespace {

constexpr int kSysTileRows = 64;        // the system part runs 64-row query tiles
constexpr int64_t kMinSplitKeys = 256;  // no part of the prefix shorter than this
constexpr int kSysBlocksPerSm = 2;

// Parts along the prefix: enough that the system part has kSysBlocksPerSm blocks per SM.
int SystemSplits(const RelayShape& s) {
  if (s.groups <= 0 || s.kv_heads <= 0) return 1;
  const int64_t gqa = s.num_heads / s.kv_heads;
  const int64_t tiles = (int64_t{s.max_group_rows} * gqa + kSysTileRows - 1) / kSysTileRows;
  const int64_t blocks = std::max<int64_t>(1, tiles * s.kv_heads * s.groups);
  const int64_t want = (int64_t{kSysBlocksPerSm} * CurrentDeviceSmCount() + blocks - 1) / blocks;
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::max<int64_t>(1, s.max_prefix_tokens / kMinSplitKeys)));
}

using internal::Align4Floats;

}  // namespace

int64_t RelayDecodeWorkspaceFloats(const RelayShape& s) {
  if (s.rows <= 0 || s.num_heads <= 0 || s.head_dim <= 0) return 0;
  const int splits = SystemSplits(s);
  return Align4Floats(DecodeWorkspaceFloats(s.rows, s.num_heads, s.head_dim, s.max_context_tokens)) +
         Align4Floats(int64_t{s.rows} * s.num_heads) + Align4Floats(int64_t{s.grouped_rows} * splits * s.num_heads * s.head_dim) +
         int64_t{s.grouped_rows} * splits * s.num_heads;
}

absl::Status LaunchRelayDecodeAttention(const RelayDecodeParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.groups < 0 || p.grouped_rows < 0 || p.grouped_rows > p.rows || p.max_group_rows < 0 ||
      (p.groups == 0) != (p.grouped_rows == 0) || p.max_prefix_tokens < 0) {
    return absl::InvalidArgumentError("relay attention: bad row or group counts");
  }
  const PagedKv& kv = p.context;
  if (kv.k_pages != p.prefixes.k_pages || kv.v_pages != p.prefixes.v_pages || kv.page_size != p.prefixes.page_size ||
      kv.kv_heads != p.prefixes.kv_heads || kv.head_dim != p.prefixes.head_dim) {
    return absl::InvalidArgumentError("relay attention: context and prefixes must be views of one pool");
  }
  if (p.rows == 0) return absl::OkStatus();
  const RelayShape shape{p.rows,      p.groups,    p.grouped_rows,       p.max_group_rows,   p.num_heads,
                         kv.kv_heads, kv.head_dim, p.max_context_tokens, p.max_prefix_tokens};
  const int64_t head_floats = int64_t{p.num_heads} * kv.head_dim;
  float* ctx_lse = p.workspace + Align4Floats(DecodeWorkspaceFloats(p.rows, p.num_heads, kv.head_dim, p.max_context_tokens));
  float* parts_o = ctx_lse + Align4Floats(int64_t{p.rows} * p.num_heads);
  // The context part (it validates the shapes the system part shares).
  if (absl::Status s = LaunchPagedDecodeAttention(
          {p.q, kv, p.rows, p.num_heads, p.scale, p.max_context_tokens, p.workspace, p.out, ctx_lse}, stream);
      !s.ok()) {
    return s;
  }
  if (p.groups == 0) return absl::OkStatus();
  if (p.groups > 65535) return absl::InvalidArgumentError("relay attention takes at most 65535 groups");
  const int splits = SystemSplits(shape);
  float* parts_lse = parts_o + Align4Floats(int64_t{p.grouped_rows} * splits * head_floats);
  PrefillAttentionTcParams prompt_part{p.q,         p.prefixes, p.group_rows,     p.groups, p.grouped_rows,
                                       p.num_heads, p.scale,    p.max_group_rows, nullptr,  nullptr};
  prompt_part.all_keys = true;
  internal::PrefillTcParams sys = internal::ToTcParams(prompt_part);
  sys.key_splits = splits;
  sys.ws_o = parts_o;
  sys.ws_lse = parts_lse;
  STRATA_CUDA_RETURN_IF_ERROR(
      internal::PagedPrefillAttentionTcAsync(sys, internal::PrefillTcTiles::k64Rows4Warps, stream));
  // The system part's pieces merged with the context part already in `out`.
  STRATA_CUDA_RETURN_IF_ERROR(internal::MergeStatesAsync(parts_o, parts_lse, splits, p.grouped_rows, p.num_heads,
                                                         kv.head_dim, p.out, nullptr, stream, ctx_lse));
  return absl::OkStatus();
}

#else  // !STRATA_WITH_CUDA

int64_t RelayDecodeWorkspaceFloats(const RelayShape&) { return 0; }
absl::Status LaunchRelayDecodeAttention(const RelayDecodeParams&, cudaStream_t) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
