#include "kernels/attention/relay.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "kernels/attention/decode.h"
#include "kernels/attention/decode_parts.h"
#include "kernels/attention/prefill.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/alignment.h"
#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/attention/merge_launch.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/relay_launch.h"
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

namespace {

constexpr int kSysTileRows = 64;        // the system part runs 64-row query tiles
constexpr int64_t kMinSplitKeys = 256;  // no part of the prefix shorter than this
constexpr int kSysBlocksPerSm = 2;
constexpr int kContextBlocksPerSm = 2;
// Where the rows' own tokens are most of the bytes (64 rows of 1K), the context part runs
// twice the blocks: 0.143 -> 0.124 ms at 64 x 1K x 1K on the H100, 5-7% at 64 x 4K/8K x 1K;
// at 32 rows or 128-token contexts it loses up to 13% (relay_attention_bench --sweep,
// docs/BENCHMARKS.md).
constexpr int64_t kManyContextTokens = 64 * 1024;
constexpr int kManyContextBlocksPerSm = 4;

std::atomic<int64_t> chained_min_part_keys{internal::kRelayChainedMinPartKeys};  // ...ForBenchmarks

using internal::Align4Floats;
using internal::IsAligned;

int Subgroup(const RelayShape& s) { return GqaSubgroupSize(GqaGroupSize(s.num_heads, s.kv_heads)); }

// The system part's blocks for one part along the prefix: its query tiles of tile_rows
// (every query head of a group's rows) over every KV head and group.
int64_t SystemBlocks(const RelayShape& s, int tile_rows) {
  const int64_t gqa = s.num_heads / s.kv_heads;
  const int64_t tiles = (int64_t{s.max_group_rows} * gqa + tile_rows - 1) / tile_rows;
  return std::max<int64_t>(1, tiles * s.kv_heads * s.groups);
}

// Parts along the prefix: enough that the system part has kSysBlocksPerSm blocks per SM.
int SystemSplits(const RelayShape& s, int blocks_per_sm = kSysBlocksPerSm) {
  if (s.groups <= 0 || s.kv_heads <= 0) return 1;
  const int64_t blocks = SystemBlocks(s, kSysTileRows);
  const int64_t want = (int64_t{blocks_per_sm} * CurrentDeviceSmCount() + blocks - 1) / blocks;
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::max<int64_t>(1, s.max_prefix_tokens / kMinSplitKeys)));
}

// Parts along the prefix for the three launches' system part (64-key tiles): whole rounds
// of the SMs (WholeRoundParts, decode_parts.h), parts of at least kMinSplitKeys. tile_rows: the form's query rows a block (64, or 128 for two warpgroups); blocks_per_sm:
// how many of its blocks an SM holds.
// sms: the SMs the split aims at (0: all of them); min_part_keys: the shortest part where the
// prefix holds kRelayChainedMinParts of them (else, and at 0, kMinSplitKeys).
int ThreeLaunchSplits(const RelayShape& s, int tile_rows, int blocks_per_sm, int sms = 0, int64_t min_part_keys = 0) {
  if (s.groups <= 0 || s.kv_heads <= 0) return 1;
  const int64_t min_keys =
      s.max_prefix_tokens / std::max<int64_t>(1, min_part_keys) >= internal::kRelayChainedMinParts
          ? std::max(min_part_keys, kMinSplitKeys)
          : kMinSplitKeys;
  const int most = static_cast<int>(std::clamp<int64_t>(s.max_prefix_tokens / min_keys, 1, 64));
  const int device_sms = CurrentDeviceSmCount();
  const int64_t round = sms > 0 ? std::min(sms, device_sms) : device_sms;
  return WholeRoundParts(SystemBlocks(s, tile_rows), int64_t{blocks_per_sm} * round, (s.max_prefix_tokens + 63) / 64,
                         most);
}
int ThreeLaunchSplits(const RelayShape& s, internal::RelaySystemForm form, int sms = 0, int64_t min_part_keys = 0) {
  if (form == internal::RelaySystemForm::kWgmmaWs) return ThreeLaunchSplits(s, 128, 1, sms, min_part_keys);
  return ThreeLaunchSplits(s, 64, kSysBlocksPerSm, sms, min_part_keys);
}

// The fused launch's parts along each row's own tokens, by the split-K decode's rule
// (decode.h): enough that the context part alone has blocks_per_sm blocks per SM, each part
// a multiple of kDecodePartAlign tokens.
KeySplit ContextSplitOf(const RelayShape& s, int blocks_per_sm = kContextBlocksPerSm) {
  const int subgroup = std::max(1, Subgroup(s));
  const int64_t blocks_per_part =
      std::max<int64_t>(1, int64_t{s.rows} * s.kv_heads * (s.num_heads / std::max(1, s.kv_heads) / subgroup));
  const int64_t tokens = std::max<int64_t>(1, s.max_context_tokens);
  int parts = PartsForBlocks(blocks_per_part, tokens, int64_t{blocks_per_sm} * CurrentDeviceSmCount(), kDecodePartAlign);
  // Rows of unequal length: parts no longer than the typical row (within the parts a decode's
  // workspace holds, which FusedWorkspaceFloats sizes for).
  parts = PartsForUnevenRows(parts, tokens, s.typical_context_tokens, std::max(parts, DecodeMostParts(s.rows, tokens)),
                             kDecodePartAlign);
  return AlignedKeySplit(tokens, parts, kDecodePartAlign);
}

// The fused launch takes a shape with groups whose context part runs on the CUDA cores
// (the fused kernel's decode block) with `context_kernel`; where the decode takes the
// tensor cores, the three launches do.
bool FusedShape(const RelayShape& s, DecodeKernel context_kernel) {
  return s.groups > 0 && s.num_heads > 0 && IsDispatchedHeadDim(s.head_dim) && Subgroup(s) > 0 &&
         !DecodeRunsOnTensorCores(context_kernel, s.head_dim, s.num_heads, s.kv_heads, s.rows, s.max_context_tokens);
}

int64_t ThreeLaunchWorkspaceFloats(const RelayShape& s, const internal::RelayTuning& t = {}) {
  const int splits = std::max({ThreeLaunchSplits(s, 64, kSysBlocksPerSm), ThreeLaunchSplits(s, 128, 1),
                               ThreeLaunchSplits(s, t.system_form, t.system_sms)});  // (longer parts: fewer)
  return Align4Floats(DecodeWorkspaceFloats(s.rows, s.num_heads, s.head_dim, s.max_context_tokens)) +
         Align4Floats(int64_t{s.rows} * s.num_heads) +
         Align4Floats(int64_t{s.grouped_rows} * splits * s.num_heads * s.head_dim) +
         int64_t{s.grouped_rows} * splits * s.num_heads;
}

// Every row's parts, [rows][parts][num_heads][head_dim] then their lse [rows][parts][num_heads].
int64_t FusedPartsFloats(const RelayShape& s, int parts) {
  return Align4Floats(int64_t{s.rows} * parts * s.num_heads * s.head_dim);
}
int64_t FusedWorkspaceFloats(const RelayShape& s, const internal::RelayTuning& t) {
  RelayShape uneven = s;  // the most parts: rows of any typical length
  uneven.typical_context_tokens = 1;
  const int parts = ContextSplitOf(uneven, t.context_blocks_per_sm).parts + SystemSplits(s, t.system_blocks_per_sm);
  return FusedPartsFloats(s, parts) + int64_t{s.rows} * parts * s.num_heads;
}

RelayShape ShapeOf(const RelayDecodeParams& p) {
  return RelayShape{p.rows,      p.groups,    p.grouped_rows,       p.max_group_rows,   p.num_heads,
                    p.context.kv_heads, p.context.head_dim, p.max_context_tokens, p.max_prefix_tokens,
                    p.typical_context_tokens};
}

bool HasSide(const RelaySide& side) {
  return side.stream != nullptr && side.fork != nullptr && side.join != nullptr;
}

// The form and balance the public launch takes for a shape: on a device with programmatic
// dependent launch, the three launches chained, the system part on the wgmma form, where the
// rows' own tokens reach chained_min_context_tokens; given a second stream, the three
// launches with the system part beside the decode where they reach side.min_context_tokens;
// chained again (on such a device) where the context part runs on the tensor cores and
// chained_min_context_tokens is kRelayChainedOnTensorCores; else the fused launch, its
// context part twice the blocks from kManyContextTokens (or the three launches, where the
// context part runs on the tensor cores).
internal::RelayTuning DefaultTuning(const RelayShape& s, const RelayDecodeParams& p) {
  internal::RelayTuning t;
  t.context_kernel = p.context_kernel;
  const int64_t context_tokens = int64_t{s.rows} * s.max_context_tokens;
  if (context_tokens >= kManyContextTokens) t.context_blocks_per_sm = kManyContextBlocksPerSm;
  const bool dependents = CurrentDeviceComputeCapability() >= 90;
  auto chain = [&] {
    t.three_launches = t.chained = true;
    t.system_form = internal::RelaySystemForm::kWgmmaWs;
    t.system_min_part_keys = chained_min_part_keys.load(std::memory_order_relaxed);
  };
  if (p.chained_min_context_tokens >= 0 && context_tokens >= p.chained_min_context_tokens && dependents) {
    chain();
  } else if (HasSide(p.side) && context_tokens >= p.side.min_context_tokens) {
    t.three_launches = t.beside = true;
  } else if (p.chained_min_context_tokens == kRelayChainedOnTensorCores && dependents &&
             DecodeRunsOnTensorCores(p.context_kernel, s.head_dim, s.num_heads, s.kv_heads, s.rows,
                                     s.max_context_tokens)) {
    chain();
  }
  return t;
}

// With out_bf16, rows [first, rows) of `out` cast into it (the rows no merge stored there).
absl::Status CastRows(const RelayDecodeParams& p, int first, cudaStream_t stream) {
  if (p.out_bf16 == nullptr || first >= p.rows) return absl::OkStatus();
  const int64_t row_floats = int64_t{p.num_heads} * p.context.head_dim;
  return LaunchToBf16({p.out + first * row_floats, p.out_bf16 + first * row_floats, (p.rows - first) * row_floats},
                      stream);
}

// What LaunchPagedDecodeAttention checks of the context part, for the fused launch that
// runs its kernel directly.
absl::Status CheckContextPart(const RelayDecodeParams& p) {
  const PagedKv& kv = p.context;
  if (absl::Status s = internal::CheckSizes(p.rows, p.num_heads, p.max_context_tokens); !s.ok()) return s;
  if (!IsDispatchedHeadDim(kv.head_dim)) {
    return absl::InvalidArgumentError("paged attention takes head_dim 64, 80, 96, 128 or 256");
  }
  if (!IsDispatchedGqaGroupSize(GqaGroupSize(p.num_heads, kv.kv_heads)) || kv.page_size <= 0) {
    return absl::InvalidArgumentError("paged attention needs 1 to 64 query heads per KV head (a divisor of the heads)");
  }
  if (!IsAligned(p.q, 16) || !IsAligned(kv.k_pages, 16) || !IsAligned(kv.v_pages, 16)) {
    return absl::InvalidArgumentError("paged attention needs q, k_pages and v_pages 16-byte aligned");
  }
  if (p.max_context_tokens > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("max_tokens too large");
  }
  return absl::OkStatus();
}

// Both parts in one launch, each block writing its part to the workspace, then the merge.
absl::Status LaunchFused(const RelayDecodeParams& p, const RelayShape& shape, const internal::RelayTuning& t,
                         cudaStream_t stream) {
  const PagedKv& kv = p.context;
  const int subgroup = Subgroup(shape), subgroups = p.num_heads / kv.kv_heads / subgroup;
  const KeySplit context = ContextSplitOf(shape, t.context_blocks_per_sm);
  const int system_splits = SystemSplits(shape, t.system_blocks_per_sm);
  const int parts = context.parts + system_splits;
  float* parts_o = p.workspace;
  float* parts_lse = parts_o + FusedPartsFloats(shape, parts);

  internal::RelayFusedArgs a{};
  PrefillAttentionTcParams prompt_part{p.q,         p.prefixes, p.group_rows,     p.groups, p.grouped_rows,
                                       p.num_heads, p.scale,    p.max_group_rows, nullptr,  nullptr};
  prompt_part.all_keys = true;
  a.system = internal::ToTcParams(prompt_part);
  a.system.key_splits = system_splits;
  a.system.ws_o = parts_o;
  a.system.ws_lse = parts_lse;
  a.system.ws_row_parts = parts;
  a.system.ws_first_part = context.parts;
  const int64_t tiles = (int64_t{p.max_group_rows} * subgroup + kSysTileRows - 1) / kSysTileRows;
  a.context = internal::SplitKvArgs{p.q,          kv.k_pages, kv.v_pages,  kv.page_size,        kv.kv_heads,
                                    kv.head_dim,  kv.indptr,  kv.indices,  kv.last_page_len,    nullptr,
                                    p.rows,       p.rows,     p.num_heads, p.scale,             context.parts,
                                    context.part_tokens, parts_o, parts_lse, p.out,             nullptr,
                                    parts,        0};
  a.context_grid_y = kv.kv_heads * subgroups;
  const int64_t system_blocks = tiles * system_splits * a.context_grid_y * p.groups;
  const int64_t blocks = system_blocks + int64_t{context.parts} * a.context_grid_y * p.rows;
  if (blocks > std::numeric_limits<int32_t>::max()) return absl::InvalidArgumentError("relay attention too large");
  a.system_grid_x = static_cast<int>(tiles * system_splits);
  a.system_grid_y = a.context_grid_y;
  a.system_blocks = static_cast<int>(system_blocks);
  a.blocks = static_cast<int>(blocks);
  a.context_first = t.context_first;
  cudaError_t e = cudaErrorInvalidValue;
  STRATA_DISPATCH_HEAD_DIM(kv.head_dim, kHeadDim, { e = internal::RelayFusedForHeadDim<kHeadDim>(a, stream); })
  STRATA_CUDA_RETURN_IF_ERROR(e);
  STRATA_CUDA_RETURN_IF_ERROR(internal::MergeRowPartsAsync(parts_o, parts_lse, parts, p.grouped_rows, context.parts,
                                                           p.rows, p.num_heads, kv.head_dim, p.out, stream));
  return CastRows(p, 0, stream);
}

// The system part's kernel (RelaySystemForm): the Hopper form only where asked for and the
// device has it.
cudaError_t LaunchSystemPart(const internal::PrefillTcParams& sys, internal::RelaySystemForm form,
                             cudaStream_t stream) {
  if (form == internal::RelaySystemForm::kWgmmaWs && internal::PrefillWgmmaSupported(sys.head_dim)) {
    return internal::PagedPrefillAttentionWgmmaWsAsync(sys, stream);
  }
  return internal::PagedPrefillAttentionTcAsync(sys, internal::PrefillTcTiles::k64Rows4Warps, stream);
}

// The context part (paged decode with its lse), the system part (the tensor-core prefill
// kernel, split along the prefix), and one merge of both. With `beside`, the system part
// runs on p.side.stream from the fork, launched first so that its blocks take their SMs
// before the decode's fill the rest, and the merge waits for the join. With `chained`, the
// same order on `stream`: the system part, then the decode as its programmatic dependent
// (it reads nothing the system part writes), then the merge, which the stream orders after
// both.
absl::Status LaunchThree(const RelayDecodeParams& p, const RelayShape& shape, const internal::RelayTuning& t,
                         cudaStream_t stream) {
  const internal::RelaySystemForm form = t.system_form;
  const bool beside = p.groups > 0 && t.beside && HasSide(p.side);
  const bool chained = p.groups > 0 && !beside && t.chained;
  const PagedKv& kv = p.context;
  const int64_t head_floats = int64_t{p.num_heads} * kv.head_dim;
  float* ctx_lse =
      p.workspace + Align4Floats(DecodeWorkspaceFloats(p.rows, p.num_heads, kv.head_dim, p.max_context_tokens));
  float* parts_o = ctx_lse + Align4Floats(int64_t{p.rows} * p.num_heads);
  DecodeAttentionParams context_part{p.q,         kv,    p.rows, p.num_heads, p.scale, p.max_context_tokens,
                                     p.workspace, p.out, ctx_lse};
  context_part.launch = {.dependent = chained};
  if (p.groups == 0) context_part.out_bf16 = p.out_bf16;  // else the merge needs its fp32 rows
  context_part.typical_tokens = p.typical_context_tokens;
  context_part.kernel = t.context_kernel;
  if (!beside && !chained) {
    // The context part (it validates the shapes the system part shares).
    if (absl::Status s = LaunchPagedDecodeAttention(context_part, stream); !s.ok()) return s;
    if (p.groups == 0) return absl::OkStatus();
  } else if (absl::Status s = CheckContextPart(p); !s.ok()) {
    return s;
  }
  const int splits = ThreeLaunchSplits(shape, form, t.system_sms, t.system_min_part_keys);
  float* parts_lse = parts_o + Align4Floats(int64_t{p.grouped_rows} * splits * head_floats);
  PrefillAttentionTcParams prompt_part{p.q,         p.prefixes, p.group_rows,     p.groups, p.grouped_rows,
                                       p.num_heads, p.scale,    p.max_group_rows, nullptr,  nullptr};
  prompt_part.all_keys = true;
  internal::PrefillTcParams sys = internal::ToTcParams(prompt_part);
  sys.key_splits = splits;
  sys.ws_o = parts_o;
  sys.ws_lse = parts_lse;
  if (beside) {
    const RelaySide& side = p.side;
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(side.fork, stream));
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side.stream, side.fork, 0));
    const cudaError_t sys_error = LaunchSystemPart(sys, form, side.stream);
    // The join is recorded and waited for whatever failed: a capture must end joined.
    const absl::Status context_status =
        sys_error == cudaSuccess ? LaunchPagedDecodeAttention(context_part, stream) : absl::OkStatus();
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(side.join, side.stream));
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, side.join, 0));
    STRATA_CUDA_RETURN_IF_ERROR(sys_error);
    if (!context_status.ok()) return context_status;
  } else if (chained) {
    STRATA_CUDA_RETURN_IF_ERROR(LaunchSystemPart(sys, form, stream));
    if (absl::Status s = LaunchPagedDecodeAttention(context_part, stream); !s.ok()) return s;
  } else {
    STRATA_CUDA_RETURN_IF_ERROR(LaunchSystemPart(sys, form, stream));
  }
  // The system part's pieces merged with the context part already in `out`.
  STRATA_CUDA_RETURN_IF_ERROR(internal::MergeStatesAsync(parts_o, parts_lse, splits, p.grouped_rows, p.num_heads,
                                                         kv.head_dim, p.out, nullptr, stream, ctx_lse, p.out_bf16));
  return CastRows(p, p.grouped_rows, stream);
}

}  // namespace

// The workspace holds the fused launch's parts wherever the shape allows that launch with
// the context part on the CUDA cores, which RelayDecodeParams::context_kernel may ask for
// where kAuto's rule would take the tensor cores (and the three launches).
int64_t RelayDecodeWorkspaceFloats(const RelayShape& s) {
  if (s.rows <= 0 || s.num_heads <= 0 || s.head_dim <= 0) return 0;
  const int64_t three = ThreeLaunchWorkspaceFloats(s);
  return FusedShape(s, DecodeKernel::kCudaCores)
             ? std::max(three, FusedWorkspaceFloats(s, DefaultTuning(s, RelayDecodeParams{})))
             : three;
}

int64_t internal::RelayDecodeWorkspaceFloats(const RelayShape& s, const RelayTuning& t) {
  if (s.rows <= 0 || s.num_heads <= 0 || s.head_dim <= 0) return 0;
  const int64_t three = ThreeLaunchWorkspaceFloats(s, t);
  return FusedShape(s, DecodeKernel::kCudaCores) ? std::max(three, FusedWorkspaceFloats(s, t)) : three;
}

int internal::RelaySystemSplits(const RelayShape& s, RelaySystemForm form, int sms, int64_t min_part_keys) {
  return ThreeLaunchSplits(s, form, sms, min_part_keys);
}

void internal::SetRelayChainedMinPartKeysForBenchmarks(int64_t keys) { chained_min_part_keys.store(keys); }

absl::Status LaunchRelayDecodeAttention(const RelayDecodeParams& p, cudaStream_t stream) {
  return internal::LaunchRelayDecodeAttention(p, DefaultTuning(ShapeOf(p), p), stream);
}

absl::Status internal::LaunchRelayDecodeAttention(const RelayDecodeParams& p, const RelayTuning& t,
                                                  cudaStream_t stream) {
  if (p.rows < 0 || p.groups < 0 || p.grouped_rows < 0 || p.grouped_rows > p.rows || p.max_group_rows < 0 ||
      (p.groups == 0) != (p.grouped_rows == 0) || (p.groups > 0 && p.max_group_rows == 0) ||
      p.max_prefix_tokens < 0) {
    return absl::InvalidArgumentError("relay attention: bad row or group counts");
  }
  const PagedKv& kv = p.context;
  if (kv.k_pages != p.prefixes.k_pages || kv.v_pages != p.prefixes.v_pages || kv.page_size != p.prefixes.page_size ||
      kv.kv_heads != p.prefixes.kv_heads || kv.head_dim != p.prefixes.head_dim) {
    return absl::InvalidArgumentError("relay attention: context and prefixes must be views of one pool");
  }
  if (!IsAligned(p.out_bf16, 8)) return absl::InvalidArgumentError("relay attention: out_bf16 must be 8-byte aligned");
  if (p.rows == 0) return absl::OkStatus();
  if (p.groups > 65535) return absl::InvalidArgumentError("relay attention takes at most 65535 groups");
  const RelaySide& side = p.side;
  if ((side.stream != nullptr || side.fork != nullptr || side.join != nullptr) && !HasSide(side)) {
    return absl::InvalidArgumentError("relay attention: a side stream needs both its events");
  }
  if (HasSide(side) && side.stream == stream) {
    return absl::InvalidArgumentError("relay attention: the side stream must not be the launch's stream");
  }
  const RelayShape shape = ShapeOf(p);
  if (!t.three_launches && FusedShape(shape, t.context_kernel) && IsAligned(p.workspace, 16) && IsAligned(p.out, 16)) {
    if (absl::Status s = CheckContextPart(p); !s.ok()) return s;
    return LaunchFused(p, shape, t, stream);
  }
  return LaunchThree(p, shape, t, stream);
}

#else  // !STRATA_WITH_CUDA

int64_t RelayDecodeWorkspaceFloats(const RelayShape&) { return 0; }
int64_t internal::RelayDecodeWorkspaceFloats(const RelayShape&, const RelayTuning&) { return 0; }
int internal::RelaySystemSplits(const RelayShape&, RelaySystemForm, int, int64_t) { return 1; }
void internal::SetRelayChainedMinPartKeysForBenchmarks(int64_t) {}
absl::Status LaunchRelayDecodeAttention(const RelayDecodeParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status internal::LaunchRelayDecodeAttention(const RelayDecodeParams&, const RelayTuning&, cudaStream_t) {
  return internal::NoCuda();
}

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
