// Planning a batch of prompts as a whole (BatchLLM, Zheng et al., §3): the prefix tree of
// all prompts at token level, the shared prefixes chosen by dynamic programming, the
// prompts grouped by the prefix they share, and the groups ordered so that decode-heavy
// work comes first (its decode steps then mix with the prefill of the groups after it).
//
// A group's prefix is computed once and read once per step by all its members (the
// engine's shared-prefix path, relay attention); each member computes only its own
// tokens after it. The tree has many levels (a system prompt, then a document, then a
// question); the engine shares one level per turn, so the plan picks, for every branch
// of the tree, the one depth whose sharing saves the most prompt tokens:
//
//   saving(v) = max( (n(v) - 1) * depth(v),            the n(v) prompts under v share v
//                    Σ saving(child) + (e(v) - 1)+ * depth(v) )   or each child decides
//
// where n(v) counts the prompts under node v and e(v) those that end at v. The root
// (depth 0) always splits. That is BatchLLM's Algorithm 1 (prefix enlargement), exact on
// the compressed tree. Depths are counted in PlanOptions::granularity (tokens by default:
// both backends share prefixes of any length), and a prefix shorter than `min_prefix_tokens` is not
// worth a group: its prompts run alone.
#ifndef STRATA_BATCH_BATCH_PLAN_H_
#define STRATA_BATCH_BATCH_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace strata::batch {

// What the plan knows of one prompt.
struct PlanPrompt {
  absl::Span<const int32_t> tokens;  // the whole prompt (not empty)
  int64_t max_new_tokens = 0;        // the decode length estimate
};

enum class Planning {
  kGlobal,      // the prefix tree, the DP above, groups ordered by decode-to-prompt ratio
  kFirstLevel,  // one group per first-level prefix (what all prompts of a branch share
                // from the root), no enlargement, in input order: plain prefix reuse
  kNone,        // every prompt alone, in input order
};

struct PlanOptions {
  Planning planning = Planning::kGlobal;
  // Shared prefixes are whole multiples of this many tokens.
  int64_t granularity = 1;
  // A shared prefix shorter than this is not used (its prompts run alone).
  int64_t min_prefix_tokens = 16;
};

struct PlanGroup {
  // Tokens every member's prompt starts with that are computed once for the group (0:
  // its members run alone). Always less than each member's prompt length.
  int64_t prefix_tokens = 0;
  std::vector<int> members;  // indexes into the prompts, in run order
};

struct Plan {
  std::vector<PlanGroup> groups;  // in run order; every prompt in exactly one
  int64_t prompt_tokens = 0;      // Σ prompt lengths
  // Prompt tokens computed when the plan runs: each group's prefix once, each member's
  // tokens after it.
  int64_t computed_tokens = 0;
  // The least any plan could compute: every node of the prefix tree once (at token
  // granularity), plus each prompt's last token (its logits give the first new token,
  // so it is computed per prompt even when two prompts are equal).
  int64_t ideal_computed_tokens = 0;

  // BatchLLM's token saving ratio (Eq. 2): the share of prompt tokens not computed.
  double saving_ratio() const { return Ratio(computed_tokens); }
  double ideal_saving_ratio() const { return Ratio(ideal_computed_tokens); }

 private:
  double Ratio(int64_t computed) const {
    return prompt_tokens > 0 ? 1.0 - static_cast<double>(computed) / static_cast<double>(prompt_tokens) : 0.0;
  }
};

// Plans `prompts` (each non-empty). Deterministic: the same prompts and options give the
// same plan.
Plan MakePlan(absl::Span<const PlanPrompt> prompts, const PlanOptions& options);

}  // namespace strata::batch

#endif  // STRATA_BATCH_BATCH_PLAN_H_
