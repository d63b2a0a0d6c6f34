// How many parts along the keys the attention kernels split their work into: for the
// tensor-core decode, a cost model of the one-warp decode form, fitted to its measured times
// on the H100 (docs/BENCHMARKS.md, "The tensor-core decode's parts, by a cost model"); for
// the prefill forms with a block an SM's worth of work (relay's system part, the Hopper
// prefill), the split that fills whole rounds of the SMs. Host code only, free of CUDA, so
// the CPU suite checks its choices.
#ifndef STRATA_KERNELS_ATTENTION_DECODE_PARTS_H_
#define STRATA_KERNELS_ATTENTION_DECODE_PARTS_H_

#include <cstdint>

namespace strata::kernels {

// The shape of one tensor-core decode launch: blocks_per_part blocks (sequences x KV heads
// x subgroups) each stream one part of the sequence's keys, in 32-key tiles of head_dim;
// slots blocks are resident at once over sm_count SMs (the occupancy calculator's count).
struct TensorCoreDecodeShape {
  int64_t blocks_per_part;
  int64_t max_tokens;
  int head_dim;
  int sm_count;
  int64_t slots;
};

// The model's cost of the launch with `parts` parts, in units of the time HBM takes to
// stream one 32-key tile to every SM: wave by wave, each block's tiles and its own fixed
// cost (its query rows, its part's store, its start) at a rate that slows with the blocks
// an SM holds (a wave of b blocks an SM costs b + b0 a tile), plus the merge's read of
// every block's part when there is more than one. A ranking of counts, not a time.
double TensorCoreDecodeCost(const TensorCoreDecodeShape& shape, int parts);

// The count of parts of least cost among 1-8, 12, 16, 24, 32, 64, 128 and 256 (the counts
// the model was fitted on), at most max_parts and at most one part a 32-key tile; ties go
// to fewer parts.
int TensorCoreDecodeParts(const TensorCoreDecodeShape& shape, int max_parts);

// Whether the launch runs one part in blocks of four warps that split its key tiles (no
// merge) instead of the parts TensorCoreDecodeParts picks: where a part's blocks number
// about one an SM (more than 3/4 of the SMs), or about half that over sequences of at most
// kFourWarpShortTokens, and all are resident at once (four_warp_slots: the four-warp
// form's resident blocks over the GPU). Measured on the H100 (docs/BENCHMARKS.md, "Four
// warps a block"): 2-16% faster there than the picked parts, slower with more blocks.
inline constexpr int64_t kFourWarpShortTokens = 2048;
bool TensorCoreDecodeFourWarps(const TensorCoreDecodeShape& shape, int64_t four_warp_slots);

// Parts along the keys for a launch of `blocks` blocks a part, `slots` of them resident at
// once, over `key_tiles` key tiles: the count among 1..most that finishes soonest, counting
// a block's key tiles times the rounds its blocks take on the device (a split that leaves a
// second round of a few blocks takes twice the time of one that does not), the fewest parts
// among equals.
int WholeRoundParts(int64_t blocks, int64_t slots, int64_t key_tiles, int most);

// `tokens` keys cut into at most `parts` parts (at least 1) of a multiple of `align` tokens,
// the last part possibly shorter: the part size, and the parts it leaves (rounding the size
// up can leave fewer than asked). Every split along the keys (the decodes', relay's context
// part) is one of these.
struct KeySplit {
  int parts;
  int part_tokens;
};
KeySplit AlignedKeySplit(int64_t tokens, int64_t parts, int align);

// The parts a split along `tokens` keys starts from: the fewest that give `want_blocks`
// blocks at `blocks_per_part` blocks a part, at least 1 and at most one part per `align`
// tokens (the CUDA-core decode's rule, and relay's fused context part; AlignedKeySplit then
// sizes them).
int PartsForBlocks(int64_t blocks_per_part, int64_t tokens, int64_t want_blocks, int align);

// Parts along the keys for rows of unequal length: at least enough that no part is longer
// than the rows' typical length (their mean, rounded up to `align` tokens), so one long row
// among short ones is split as finely as they are instead of walking its keys alone, in one
// block a head, long after the rest are done; within `most` (the parts the workspace holds).
// `parts` is the launch's own count for rows of max_tokens; typical_tokens <= 0 or at least
// max_tokens leaves it. (64 sessions whose own tokens are drawn exponentially, mean 1K, as
// strata bench draws them, hold one of ~4.7K: on the H100 the longest rows' lone blocks made
// the chained relay's decode steps 13.6 ms instead of 10.8, docs/BENCHMARKS.md.)
int PartsForUnevenRows(int parts, int64_t max_tokens, int64_t typical_tokens, int most, int align);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_DECODE_PARTS_H_
