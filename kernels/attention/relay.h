// Relay attention on the device (RelayAttention, ACL'24) for decode rows, the twin of
// relay_cpu.h: sequences that start with one shared prefix (a system prompt whose pages
// they share in the pool) attend to it as a group, so the prefix's KV is read once per
// group and step instead of once per sequence. Conventions: decode.h.
//
//   context part: every row against its own pages (the split-K paged decode, decode.h),
//                 split along the row's tokens into parts;
//   system part:  each group's rows against the group's prefix pages, all of them (the
//                 tensor-core prefill kernel with all_keys: the group's queries are the rows
//                 of its tiles, so K and V of the prefix are read once per tile), split along
//                 the prefix so that a few groups still fill the device, into parts;
//   merge:        every row's parts on log-sum-exp in one pass.
//
// Two launches: one grid runs both parts at once (its first blocks the system part's
// tiles, the rest the context part's blocks; each writes its part's (o, lse) to the
// workspace), then the merge writes `out`. Where the context part runs on the tensor
// cores (RelayDecodeParams::context_kernel, or kAuto by decode.h's rule, e.g. 5 or more
// query heads per KV head), or the workspace is
// not 16-byte aligned, it runs as three: the paged decode (with its own merge when split),
// the system part, and a merge of both into the decode's output. Given a second stream
// (`side`), the three launches also serve where the rows' own tokens are most of the bytes:
// the system part then runs on `side` beside the decode, the two joined by events before
// the merge (one grid holding both parts gives every context block the system part's
// shared memory and registers, and reads the contexts slower than the decode alone).
// Nothing depends on host state beyond the params, so the launches may be captured in a
// graph and replayed (the fork and the join become the graph's edges). On Hopper the three
// launches may also run chained on one stream (chained_min_context_tokens; by default where
// the context part runs on the tensor cores), the decode a programmatic dependent of the
// system part: the beside form's order without a fork.
//
// Rows [0, group_rows[groups]) belong to groups (group g: rows [group_rows[g],
// group_rows[g+1])); the rows after them have no shared prefix (their context is all
// their pages). Equals LaunchPagedDecodeAttention over each row's whole sequence (prefix
// pages then own pages) within bf16-operand accuracy (the system part's: see prefill.h).
#ifndef STRATA_KERNELS_ATTENTION_RELAY_H_
#define STRATA_KERNELS_ATTENTION_RELAY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/decode.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/stream.h"

namespace strata::kernels {

// A second stream for the system part, and two events of the caller's (made with
// cudaEventDisableTiming): `fork` is recorded on the launch's stream and waited for by
// `stream` before the system part; `join` is recorded on `stream` after it and waited for
// by the launch's stream before the merge. The launch leaves both streams joined, also when
// it fails; the events may be reused by the next launch. All null: one stream. The launch
// takes the side stream where the rows' own tokens (rows x max_context_tokens) reach
// `min_context_tokens` (0: always, as tests ask), and the fused launch below it. The
// default, kRelayBesideMinContextTokens, is the kernel's measured rule (relay_attention_bench
// on the H100, docs/BENCHMARKS.md): beside the decode the attention is 6-10% faster from 32
// rows of 1K tokens, and ties or loses at 8 rows of 1K. Inside a decode step's graph it
// loses (relay_step_bench: the graph launches the fork's branches in its own order, so the
// system part's blocks may queue behind the decode's), so the model passes it only when
// asked (CudaModelOptions::relay_beside_min_tokens).
inline constexpr int64_t kRelayBesideMinContextTokens = 32 * 1024;
struct RelaySide {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  int64_t min_context_tokens = kRelayBesideMinContextTokens;
};

// RelayDecodeParams::chained_min_context_tokens' rules other than a count of tokens.
inline constexpr int64_t kRelayChainedOnTensorCores = -1;
inline constexpr int64_t kRelayChainedNever = -2;

struct RelayDecodeParams {
  const float* q;             // [rows][num_heads][head_dim], fp32, rotated
  PagedKv context;            // per row (indptr over rows): the row's own pages
  PagedKv prefixes;           // per group (indptr over groups): the prefix's pages; pool as context's
  const int32_t* group_rows;  // device [groups + 1], group_rows[0] = 0
  int rows, groups;
  int grouped_rows;    // group_rows[groups], known on the host
  int max_group_rows;  // the largest group (sizes the system part's grid)
  int num_heads;
  float scale;
  int64_t max_context_tokens;  // bounds every row's context (sets the decode split)
  int64_t max_prefix_tokens;   // bounds every group's prefix (sets the system part's split)
  float* workspace;            // RelayDecodeWorkspaceFloats(...) floats
  float* out;                  // [rows][num_heads][head_dim]
  RelaySide side = {};         // optional (see RelaySide)
  // When set, the rows go here as bf16 (ToBf16's rounding of what `out` would hold: the o
  // projection's input) and `out` is scratch: the merge of the grouped rows stores bf16, the
  // rows in no group are cast from the decode's (the plain decode stores them itself where
  // there are no groups), so a step needs no cast of its own after relay. 8-byte aligned.
  uint16_t* out_bf16 = nullptr;
  // Where the rows' own tokens (rows x max_context_tokens) reach this many, on a device
  // with programmatic dependent launch (compute capability 9.0 or later), the three launches
  // run chained on the launch's stream: the system part first (on Hopper's wgmma form where
  // it takes the head_dim), then the decode as its programmatic dependent
  // (kernels/dependent_launch.cuh), which starts once every system block has started and
  // fills the SMs they leave, then the merge. The beside form's order on one stream, so a
  // graph keeps it; taken before the side stream where both would be.
  // kRelayChainedOnTensorCores (the default): chained where the context part runs on the
  // tensor cores (DecodeKernel, decode.h's rule: relay's three launches in any case), after
  // the side stream; kRelayChainedNever: never. With the CUDA-core decode on the H100 it
  // tied the three launches at the kernel (up to 10% faster at 128-token contexts, up to 5%
  // slower at 1K) and the fused launch in the server; with the tensor-core decode on the
  // H200 it beats the three launches at the kernel at 11 of 12 shapes of 32 and 64 rows (64
  // x 4K x 128: 0.040 against 0.049 ms), in whole decode steps (relay_step_bench 0.95-0.96x)
  // and in the server (issue 15's table at S = 4096: decode steps 0.97-0.99x;
  // docs/BENCHMARKS.md).
  int64_t chained_min_context_tokens = kRelayChainedOnTensorCores;
  // The rows' typical context (their mean) where they differ: the context part's split has
  // parts no longer than it (decode.h's DecodeAttentionParams::typical_tokens). 0: every
  // row taken as max_context_tokens long.
  int64_t typical_context_tokens = 0;
  // The context part's kernel (decode.h). Where it runs on the tensor cores, relay runs as
  // three launches (the fused grid holds the CUDA-core decode's blocks).
  DecodeKernel context_kernel = DecodeKernel::kAuto;
};
absl::Status LaunchRelayDecodeAttention(const RelayDecodeParams& p, cudaStream_t stream);

// The shape a relay decode's workspace depends on.
struct RelayShape {
  int rows, groups, grouped_rows, max_group_rows, num_heads, kv_heads, head_dim;
  int64_t max_context_tokens, max_prefix_tokens;
  int64_t typical_context_tokens = 0;  // RelayDecodeParams'
};
// Floats of workspace a relay decode of this shape needs (every part's (o, lse) of either
// form). Reads the device's SM count; 0 for an empty shape and without CUDA.
int64_t RelayDecodeWorkspaceFloats(const RelayShape& s);

namespace internal {
// The three launches' system part: the mma.sync kernel's 64-row tiles (the launch's), or
// Hopper's warp-specialised wgmma form (prefill_launch.h; 128-row tiles, one block an SM;
// mma.sync on a device without it). The Hopper form is 1.5x mma.sync's rate at 64 rows of
// an 8K prompt, but it takes the three launches, which lose end to end (above), so only the
// chained form (the default where the decode runs on the tensor cores), relay_attention_bench
// and the tests take it (docs/BENCHMARKS.md).
enum class RelaySystemForm { kMmaSync, kWgmmaWs };

// The default chained form (the decode a programmatic dependent of the wgmma system part,
// taking the SMs its blocks leave from the start) splits the prompt in parts of at least
// kRelayChainedMinPartKeys where the prompt holds kRelayChainedMinParts of them (4K+ tokens):
// shorter parts are mostly their blocks' prologue and epilogue, and their merge costs more
// than the SMs they would take from the decode (relay_attention_bench on the H200: 32 x 4K x
// 1K 0.071 -> 0.053 ms; relay_step_bench 64 x 4K x 128 6.12 -> 5.92 ms a step). Fewer parts
// are slower: at a 1K prompt one part leaves the system part's few blocks the long pole (32 x
// 1K x 128: 0.018 -> 0.03 ms) or takes SMs the decode's one wave needs (64 x 1K x 1K: 0.089 ->
// 0.10); there the split stays over all the SMs (docs/BENCHMARKS.md).
inline constexpr int64_t kRelayChainedMinPartKeys = 1024;
inline constexpr int kRelayChainedMinParts = 4;

// The fused launch's balance, for relay_attention_bench's comparison of forms: blocks per
// SM each part is split to give on its own, which part's blocks come first in the grid, or
// the three launches instead, with the system part on p.side beside the decode (`beside`,
// where p.side is set), chained before it on the launch's stream (`chained`: the decode a
// programmatic dependent of it, on a device that has them) or after it, in `system_form`.
// With the three launches, `system_sms` aims the system part's split at one round of that
// many SMs (0: all of them), so that a decode beside it or chained behind it has the other
// SMs from the start, `system_min_part_keys` keeps its parts at least that long, and
// `context_kernel` picks the decode's kernel (decode.h).
struct RelayTuning {
  int system_blocks_per_sm = 2;
  int context_blocks_per_sm = 2;
  bool three_launches = false;
  bool context_first = false;
  bool beside = false;
  bool chained = false;
  RelaySystemForm system_form = RelaySystemForm::kMmaSync;
  int system_sms = 0;
  // The system part's shortest part along the prompt, where the prompt holds
  // kRelayChainedMinParts of them (else, and at 0, 256 keys).
  int64_t system_min_part_keys = 0;
  DecodeKernel context_kernel = DecodeKernel::kAuto;
};
absl::Status LaunchRelayDecodeAttention(const RelayDecodeParams& p, const RelayTuning& t, cudaStream_t stream);
int64_t RelayDecodeWorkspaceFloats(const RelayShape& s, const RelayTuning& t);
// The parts the three launches split the system part into along the prefix, in `form`, its
// blocks aimed at `sms` SMs (0: all), none shorter than min_part_keys where the prompt holds
// kRelayChainedMinParts of them (else, and at 0, 256 keys).
int RelaySystemSplits(const RelayShape& s, RelaySystemForm form, int sms = 0, int64_t min_part_keys = 0);
// The default chained form's shortest part of the prompt from now on (benches' A/B only).
void SetRelayChainedMinPartKeysForBenchmarks(int64_t keys);
}  // namespace internal

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_RELAY_H_
