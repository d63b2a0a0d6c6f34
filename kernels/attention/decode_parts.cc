#include "kernels/attention/decode_parts.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace strata::kernels {

namespace {

constexpr int64_t kTileTokens = 32;
// Fitted to decode_attention_bench --parts_sweep on the H100 and the H200 (2026-11-27;
// GQA 7, 8 and 16 at head_dim 128 and GQA 4 at 80, 1 to 64 sequences of 1K and 8K tokens,
// 1 to 256 parts; then GQA 7 at head_dim 128 and 64, 1 and 2 sequences of 8K and 32K; the
// rows are in decode_parts_test.cc): the counts it picks are on average within 1.8% of the
// fastest measured one, at worst 15% (the rule before it: 9% on average, at worst 74%, at
// one sequence of 8K tokens). The costs besides the tiles are times, in units of a 128-dim
// tile: at head_dim 64 a tile takes half of it (without that, one sequence of 8K and 32K
// tokens at head_dim 64 took 2x the parts and 25-29% longer than the fastest count).
constexpr double kStreamOverheadBlocks = 1.38;  // b0: a wave's time per tile ~ b + b0
constexpr double kBlockFixedTiles = 5.0;        // a block's own cost: its Q, its part's store, its start
constexpr double kMergeTilesPerPart = 0.8;      // the merge reads each block's part
// The counts the launch chooses among: those the sweeps measured. (Between them the model
// ranked counts such as 43 that do not split the tiles evenly; measured, one sequence of
// 8K tokens took 0.0302 ms at 43 parts against 0.0280 at 32.)
constexpr int kPartCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 64, 128, 256};

}  // namespace

double TensorCoreDecodeCost(const TensorCoreDecodeShape& s, int parts) {
  const int64_t tiles = std::max<int64_t>(1, (s.max_tokens + kTileTokens - 1) / kTileTokens);
  const int64_t p = std::clamp<int64_t>(parts, 1, tiles);
  const int64_t tiles_per_part = (tiles + p - 1) / p;
  const int64_t slots = std::max<int64_t>(1, s.slots);
  const double sms = std::max(1, s.sm_count);
  const int64_t blocks = std::max<int64_t>(1, s.blocks_per_part) * p;
  const double per_tile = s.head_dim > 0 ? 128.0 / s.head_dim : 1.0;  // times in this shape's tiles
  double cost = 0;
  for (int64_t left = blocks; left > 0;) {  // wave by wave
    const int64_t wave = std::min(left, slots);
    cost += (static_cast<double>(tiles_per_part) + kBlockFixedTiles * per_tile) *
            (static_cast<double>(wave) / sms + kStreamOverheadBlocks);
    left -= wave;
  }
  if (p > 1) cost += kMergeTilesPerPart * per_tile * static_cast<double>(blocks) / sms;
  return cost;
}

int TensorCoreDecodeParts(const TensorCoreDecodeShape& s, int max_parts) {
  const int64_t tiles = std::max<int64_t>(1, (s.max_tokens + kTileTokens - 1) / kTileTokens);
  const int most = static_cast<int>(std::clamp<int64_t>(max_parts, 1, tiles));
  int best = 1;
  double best_cost = TensorCoreDecodeCost(s, 1);
  for (int parts : kPartCounts) {
    if (parts <= 1 || parts > most) continue;
    if (const double cost = TensorCoreDecodeCost(s, parts); cost < best_cost) {
      best = parts;
      best_cost = cost;
    }
  }
  return best;
}

bool TensorCoreDecodeFourWarps(const TensorCoreDecodeShape& shape, int64_t four_warp_slots) {
  const int64_t blocks = shape.blocks_per_part, sms = shape.sm_count;
  if (blocks <= 0 || sms <= 0 || four_warp_slots <= 0 || blocks > four_warp_slots) return false;
  return 4 * blocks > 3 * sms || (8 * blocks > 3 * sms && shape.max_tokens <= kFourWarpShortTokens);
}

int WholeRoundParts(int64_t blocks, int64_t slots, int64_t key_tiles, int most) {
  blocks = std::max<int64_t>(1, blocks);
  slots = std::max<int64_t>(1, slots);
  key_tiles = std::max<int64_t>(1, key_tiles);
  int best = 1;
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  for (int parts = 1; parts <= most; ++parts) {
    const int64_t cost = (blocks * parts + slots - 1) / slots * ((key_tiles + parts - 1) / parts);
    if (cost < best_cost) {
      best = parts;
      best_cost = cost;
    }
  }
  return best;
}

KeySplit AlignedKeySplit(int64_t tokens, int64_t parts, int align) {
  tokens = std::max<int64_t>(1, tokens);
  parts = std::max<int64_t>(1, parts);
  const int64_t a = std::max(1, align);
  const int64_t part_tokens = ((tokens + parts - 1) / parts + a - 1) / a * a;
  return KeySplit{static_cast<int>((tokens + part_tokens - 1) / part_tokens), static_cast<int>(part_tokens)};
}

int PartsForBlocks(int64_t blocks_per_part, int64_t tokens, int64_t want_blocks, int align) {
  blocks_per_part = std::max<int64_t>(1, blocks_per_part);
  tokens = std::max<int64_t>(1, tokens);
  const int64_t a = std::max(1, align);
  const int64_t parts = (want_blocks + blocks_per_part - 1) / blocks_per_part;
  return static_cast<int>(std::clamp<int64_t>(parts, 1, (tokens + a - 1) / a));
}

int PartsForUnevenRows(int parts, int64_t max_tokens, int64_t typical_tokens, int most, int align) {
  if (typical_tokens <= 0 || typical_tokens >= max_tokens || align <= 0) return parts;
  const int64_t part_tokens = (typical_tokens + align - 1) / align * align;
  const int64_t wanted = (max_tokens + part_tokens - 1) / part_tokens;
  return static_cast<int>(std::max<int64_t>(parts, std::min<int64_t>(wanted, most)));
}

}  // namespace strata::kernels
