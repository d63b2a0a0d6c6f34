// The host side of the split-K paged attention kernel (decode.cu): validation, the choice of
// parts along the sequence and the workspace. It serves LaunchPagedDecodeAttention
// (decode.h) and the CUDA-core LaunchPagedPrefillAttention (prefill.h), which run the same
// kernel (one query row per sequence, or qo_indptr's rows).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>

#include "kernels/attention/decode.h"
#include "kernels/attention/decode_parts.h"
#include "kernels/attention/prefill.h"
#include "kernels/alignment.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/launch_checks.h"

#if defined(STRATA_WITH_CUDA)
#include "kernels/attention/decode_launch.h"
#include "kernels/attention/merge_launch.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#endif

namespace strata::kernels {

#if defined(STRATA_WITH_CUDA)

using internal::CheckSizes;
using internal::IsAligned;

namespace {

// The tensor-core decode's blocks are one warp (the CUDA-core kernel's four), so more of
// them are resident (4 per SM at head_dim 128, 57 KB of shared memory each; 7 at 64): the
// workspace is sized for parts of up to this many blocks per SM.
constexpr int kTensorCoreDecodeBlocksPerSm = 10;

// Parts per sequence for `blocks_per_part` blocks (rows x KV heads and subgroups) of one
// part each: enough parts that the launch has blocks_per_sm blocks per SM, none shorter
// than kDecodePartAlign tokens, each a multiple of it. Fewer rows or KV heads never give
// fewer parts, so the workspace bound (KV heads = 1, the tensor-core count) holds for every
// launch.
KeySplit ChooseDecodeSplit(int64_t blocks_per_part, int64_t max_tokens, int sm_count,
                           int blocks_per_sm = kDecodeBlocksPerSm) {
  return AlignedKeySplit(
      max_tokens, PartsForBlocks(blocks_per_part, max_tokens, int64_t{blocks_per_sm} * sm_count, kDecodePartAlign),
      kDecodePartAlign);
}

// The most parts a decode of `batch` sequences splits each into: the tensor-core count
// (kTensorCoreDecodeBlocksPerSm, at least the CUDA-core kernel's), which the workspace holds.
int MostDecodeParts(int batch, int64_t max_tokens, int sm_count) {
  return ChooseDecodeSplit(batch, max_tokens, sm_count, kTensorCoreDecodeBlocksPerSm).parts;
}

bool UseTensorCores(DecodeKernel kernel, int head_dim, int subgroup, int batch) {
  switch (kernel) {
    case DecodeKernel::kCudaCores:
      return false;
    case DecodeKernel::kTensorCores:
      return true;
    case DecodeKernel::kAuto:
      break;
  }
  if (head_dim > 128) return false;
  if (subgroup >= kTensorCoreDecodeMinGroup) return true;
  if (subgroup >= 4 && head_dim != 64 &&
      CurrentDevicePeakMemoryBandwidth() >= kTensorCoreDecodeFastMemoryBandwidth) {
    return true;
  }
  return head_dim == 80 && subgroup >= 4 && batch >= kTensorCoreDecodeMinBatchAt80;
}

// Resident blocks per SM of the tensor-core decode's one-warp form (or, with four_warps,
// its four-warp blocks) for this shape (the occupancy calculator's, asked once per form,
// head dim and subgroup size; 0 when it cannot say).
int TensorCoreDecodeResidentBlocks(const internal::PrefillTcParams& shape, bool four_warps = false) {
  // Per form x dispatched head dim x subgroup size 1..8.
  static std::atomic<int> cache[2][std::size(kDispatchedHeadDims)][9] = {};
  const int dim = DispatchedHeadDimIndex(shape.head_dim);
  const int subgroup = GqaSubgroupSize(shape.num_heads / shape.kv_heads);
  if (dim < 0 || subgroup < 1 || subgroup > 8) return 0;
  std::atomic<int>& slot = cache[four_warps][dim][subgroup];
  if (int known = slot.load(std::memory_order_relaxed); known > 0) return known;
  internal::PrefillTcParams query = shape;
  int blocks = 0;
  query.resident_blocks_out = &blocks;
  const cudaError_t asked =
      four_warps ? internal::PagedDecodeTcKeyWarpsAsync(query, 4, nullptr)
                 : internal::PagedPrefillAttentionTcAsync(query, internal::PrefillTcTiles::k16Rows1Warp, nullptr);
  if (asked != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  slot.store(blocks, std::memory_order_relaxed);
  return blocks;
}

std::atomic<int> forced_tensor_core_parts{0};  // SetTensorCoreDecodePartsForBenchmarks
std::atomic<KeyWarps> key_warps_mode{KeyWarps::kAuto};  // SetTensorCoreDecodeKeyWarpsForTesting
std::atomic<int> last_decode_parts{0};                  // LastDecodePartsForTesting
std::atomic<bool> last_decode_tensor_cores{false};      // LastDecodeOnTensorCoresForTesting

// Where a part's blocks number about one an SM, one part in four-warp blocks runs
// (TensorCoreDecodeFourWarps, decode_parts.h); else, where the cost model picks two
// one-warp parts, one part whose block's two warps split its keys runs instead
// (PagedDecodeTcKeyWarpsAsync): as many warps, no merge launch. On the
// H100 (decode_attention_bench --parts_sweep, docs/BENCHMARKS.md) Qwen2.5-7B 64 x 1K 0.0598
// -> 0.0555 ms. (Two-warp blocks in place of 3 or 4 parts halve the warps: faster at 32 x
// 1K, 0.0363 -> 0.0344, slower at 8 x 1K, 0.021 -> 0.028, so the cost model, fitted to
// one-warp blocks, is not asked about them.)

// A decode on the tensor-core prefill kernel: one 16-row tile (the subgroup's heads) per
// (part, KV head and subgroup, sequence).
absl::Status LaunchTensorCoreDecode(const float* q, const PagedKv& kv, int batch, int num_heads, float scale,
                                    int64_t max_tokens, int64_t typical_tokens, float* workspace, float* out,
                                    float* lse, uint16_t* out_bf16, DecodeLaunch launch, cudaStream_t stream) {
  const int group = num_heads / kv.kv_heads, subgroups = group / GqaSubgroupSize(group);
  internal::PrefillTcParams p{q,         kv.k_pages,  kv.v_pages, kv.indptr, kv.indices, kv.last_page_len,
                              nullptr,   kv.page_size, kv.kv_heads, kv.head_dim, num_heads, batch,
                              1,         scale,        out,         lse};
  const int sms = CurrentDeviceSmCount();
  const int resident = std::max(1, TensorCoreDecodeResidentBlocks(p));
  const int max_parts = MostDecodeParts(batch, max_tokens, sms);  // what the workspace holds
  const TensorCoreDecodeShape shape{int64_t{batch} * kv.kv_heads * subgroups, max_tokens, kv.head_dim, sms,
                                    int64_t{resident} * sms};
  const int picked = TensorCoreDecodeParts(shape, max_parts);
  p.key_splits = PartsForUnevenRows(picked, max_tokens, typical_tokens, max_parts, kDecodePartAlign);
  const int forced = forced_tensor_core_parts.load(std::memory_order_relaxed);
  if (forced > 0) p.key_splits = std::min(forced, max_parts);
  const KeyWarps key_warps = key_warps_mode.load(std::memory_order_relaxed);
  // (Uneven rows keep their parts: the multi-warp forms run one part a sequence.)
  const bool own_pick = key_warps == KeyWarps::kAuto && forced == 0 && kv.head_dim <= 128 && p.key_splits == picked;
  const bool four_pick =
      own_pick && TensorCoreDecodeFourWarps(shape, int64_t{TensorCoreDecodeResidentBlocks(p, true)} * sms);
  const bool two_pick = own_pick && !four_pick && p.key_splits == 2;
  const int block_warps = kv.head_dim > 128 ? 1
                          : key_warps == KeyWarps::kFour || four_pick ? 4
                          : key_warps == KeyWarps::kAlways || two_pick ? 2
                                                                       : 1;
  const bool multi_warp = block_warps > 1;
  if (four_pick || two_pick) p.key_splits = 1;
  if (p.key_splits > 1) {
    p.ws_o = workspace;
    p.ws_lse = workspace + int64_t{p.key_splits} * batch * num_heads * kv.head_dim;
  }
  if (multi_warp && p.key_splits == 1) p.out_bf16 = out_bf16;  // the multi-warp kernel stores the cast itself
  last_decode_parts.store(p.key_splits, std::memory_order_relaxed);
  p.dependent = launch.dependent;
  STRATA_CUDA_RETURN_IF_ERROR(multi_warp ? internal::PagedDecodeTcKeyWarpsAsync(p, block_warps, stream)
                                        : internal::PagedPrefillAttentionTcAsync(
                                              p, internal::PrefillTcTiles::k16Rows1Warp, stream));
  if (p.out_bf16 != nullptr) return absl::OkStatus();
  if (p.key_splits > 1) {
    STRATA_CUDA_RETURN_IF_ERROR(internal::MergeStatesAsync(p.ws_o, p.ws_lse, p.key_splits, batch, num_heads,
                                                           kv.head_dim, out, lse, stream, nullptr, out_bf16));
  } else if (out_bf16 != nullptr) {
    return LaunchToBf16({out, out_bf16, int64_t{batch} * num_heads * kv.head_dim}, stream);
  }
  return absl::OkStatus();
}

// Decode is the case qo_indptr == nullptr, rows == batch.
absl::Status LaunchPagedAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch, int rows,
                                  int num_heads, float scale, int64_t max_tokens, float* workspace, float* out,
                                  float* lse, cudaStream_t stream, DecodeKernel kernel = DecodeKernel::kCudaCores,
                                  uint16_t* out_bf16 = nullptr, DecodeLaunch launch = {}, int64_t typical_tokens = 0) {
  if (absl::Status s = CheckSizes(batch, rows, max_tokens); !s.ok()) return s;
  if (!IsDispatchedHeadDim(kv.head_dim)) {
    return absl::InvalidArgumentError("paged attention takes head_dim 64, 80, 96, 128 or 256");
  }
  if (!IsDispatchedGqaGroupSize(GqaGroupSize(num_heads, kv.kv_heads)) || kv.page_size <= 0) {
    return absl::InvalidArgumentError("paged attention needs 1 to 64 query heads per KV head (a divisor of the heads)");
  }
  if (!IsAligned(q, 16) || !IsAligned(kv.k_pages, 16) || !IsAligned(kv.v_pages, 16)) {
    return absl::InvalidArgumentError("paged attention needs q, k_pages and v_pages 16-byte aligned");
  }
  if (!IsAligned(out_bf16, 8)) return absl::InvalidArgumentError("paged attention needs out_bf16 8-byte aligned");
  if (batch == 0 || rows == 0 || num_heads == 0) return absl::OkStatus();
  if (max_tokens > std::numeric_limits<int32_t>::max()) return absl::InvalidArgumentError("max_tokens too large");
  const bool out_in_pairs = IsAligned(out, 8);  // the tensor-core form's float2 stores
  if (kernel == DecodeKernel::kTensorCores && !out_in_pairs) {
    return absl::InvalidArgumentError("tensor-core decode needs out 8-byte aligned");
  }
  if (qo_indptr == nullptr && out_in_pairs &&
      UseTensorCores(kernel, kv.head_dim, GqaSubgroupSize(GqaGroupSize(num_heads, kv.kv_heads)), batch)) {
    if (!(scale > 0.0f) || std::isinf(scale)) {  // the tensor-core kernel's running max is of unscaled scores
      return absl::InvalidArgumentError("tensor-core decode needs 0 < scale < inf");
    }
    last_decode_tensor_cores.store(true, std::memory_order_relaxed);
    return LaunchTensorCoreDecode(q, kv, batch, num_heads, scale, max_tokens, typical_tokens, workspace, out, lse,
                                  out_bf16, launch, stream);
  }
  const int sms = CurrentDeviceSmCount();
  KeySplit split = ChooseDecodeSplit(int64_t{rows} * kv.kv_heads, max_tokens, sms);
  if (qo_indptr == nullptr && typical_tokens > 0) {  // a decode of uneven rows
    const int parts = PartsForUnevenRows(split.parts, max_tokens, typical_tokens,
                                         MostDecodeParts(batch, max_tokens, sms), kDecodePartAlign);
    split = AlignedKeySplit(max_tokens, parts, kDecodePartAlign);
  }
  if (qo_indptr == nullptr) {
    last_decode_parts.store(split.parts, std::memory_order_relaxed);
    last_decode_tensor_cores.store(false, std::memory_order_relaxed);
  }
  float* ws_o = workspace;
  float* ws_lse = workspace + int64_t{split.parts} * rows * num_heads * kv.head_dim;
  internal::SplitKvArgs args{q,         kv.k_pages,  kv.v_pages,       kv.page_size, kv.kv_heads,
                                   kv.head_dim, kv.indptr, kv.indices,      kv.last_page_len, qo_indptr,
                                   batch,       rows,        num_heads,     scale,        split.parts,
                                   split.part_tokens, ws_o, ws_lse,         out,          lse};
  args.out_bf16 = out_bf16;  // the kernel or its merge stores bf16 (null for the prefill)
  args.dependent = launch.dependent;
  STRATA_CUDA_RETURN_IF_ERROR(internal::PagedDecodeAttentionAsync(args, stream));
  return absl::OkStatus();
}

}  // namespace

int64_t DecodeWorkspaceFloats(int batch, int num_heads, int head_dim, int64_t max_tokens) {
  if (batch <= 0 || num_heads <= 0 || head_dim <= 0) return 0;
  return int64_t{MostDecodeParts(batch, max_tokens, CurrentDeviceSmCount())} * batch * num_heads *
         (int64_t{head_dim} + 1);
}

int DecodeMostParts(int batch, int64_t max_tokens) {
  return batch <= 0 ? 1 : MostDecodeParts(batch, max_tokens, CurrentDeviceSmCount());
}

void SetTensorCoreDecodePartsForBenchmarks(int parts) {
  forced_tensor_core_parts.store(std::max(0, parts), std::memory_order_relaxed);
}

void SetTensorCoreDecodeKeyWarpsForTesting(KeyWarps mode) {
  key_warps_mode.store(mode, std::memory_order_relaxed);
}

int LastDecodePartsForTesting() { return last_decode_parts.load(std::memory_order_relaxed); }
bool LastDecodeOnTensorCoresForTesting() { return last_decode_tensor_cores.load(std::memory_order_relaxed); }

bool DecodeRunsOnTensorCores(DecodeKernel kernel, int head_dim, int num_heads, int kv_heads, int batch,
                             int64_t /*max_tokens: the rule does not look at it today*/) {
  const int subgroup = GqaSubgroupSize(GqaGroupSize(num_heads, kv_heads));
  if (!IsDispatchedHeadDim(head_dim) || subgroup == 0) return false;
  return UseTensorCores(kernel, head_dim, subgroup, batch);
}

absl::Status LaunchPagedDecodeAttention(const DecodeAttentionParams& p, cudaStream_t stream) {
  return LaunchPagedAttention(p.q, p.kv, nullptr, p.batch, p.batch, p.num_heads, p.scale, p.max_tokens, p.workspace,
                              p.out, p.lse, stream, p.kernel, p.out_bf16, p.launch, p.typical_tokens);
}

absl::Status LaunchPagedPrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream) {
  return LaunchPagedAttention(p.q, p.kv, p.qo_indptr, p.batch, p.rows, p.num_heads, p.scale, p.max_tokens,
                              p.workspace, p.out, p.lse, stream);
}

#else  // !STRATA_WITH_CUDA

int64_t DecodeWorkspaceFloats(int, int, int, int64_t) { return 0; }
int DecodeMostParts(int, int64_t) { return 1; }
void SetTensorCoreDecodePartsForBenchmarks(int) {}
void SetTensorCoreDecodeKeyWarpsForTesting(KeyWarps) {}
int LastDecodePartsForTesting() { return 0; }
bool LastDecodeOnTensorCoresForTesting() { return false; }
bool DecodeRunsOnTensorCores(DecodeKernel, int, int, int, int, int64_t) { return false; }
absl::Status LaunchPagedDecodeAttention(const DecodeAttentionParams&, cudaStream_t) { return internal::NoCuda(); }
absl::Status LaunchPagedPrefillAttention(const PrefillAttentionParams&, cudaStream_t) { return internal::NoCuda(); }

#endif  // STRATA_WITH_CUDA

}  // namespace strata::kernels
