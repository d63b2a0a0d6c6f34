// One forward step's plan: the batch checked and ordered, the step's shape, and its index
// arrays (token ids, positions, KV slots, page lists as indptr/indices/last_page_len,
// prompt qo_indptr, sampled rows and their sampling parameters) packed into one pinned
// block that Enqueue copies to the device at once.
//
// Order: sequences (and their rows) go decodes first: the first `decodes` sequences have
// one new row each (rows [0, decodes)), attended by the decode kernel; the others are
// prompt chunks, attended by the tensor-core prefill kernel. With relay attention, the
// decodes of two or more sequences on one shared prefix form a group: groups come first
// (rows [0, grouped_rows)), and a grouped row's page list holds only its own pages (the
// prefix's are the group's, in the relay arrays) — kernels/attention/relay.h.
//
// Pure host code: nothing here touches the GPU or a stream. Not thread-safe only in that
// the pool and the block written are the caller's.
#ifndef STRATA_MODEL_CUDA_STEP_PLAN_H_
#define STRATA_MODEL_CUDA_STEP_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/cuda/graph_cache.h"
#include "model/cuda/kv_pool.h"
#include "model/model_backend.h"
#include "model/model_config.h"

namespace strata::model::cuda_internal {

// The step's index arrays: byte offsets into one block. Fixed-size arrays first and the
// page list last, so that steps with the same batch shape keep every array at the same
// address (what a captured graph needs).
struct StepMeta {
  int64_t ids, positions, slots, kv_indptr, last_page_len, logit_rows, temperature, top_p, u, qo_prompt, relay_rows,
      relay_indptr, relay_last, kv_indices, relay_indices, bytes;
};

// `pages`: room for the sequences' page lists; `groups` and `relay_pages`: for the relay
// groups' rows and prefix page lists (last, after the sequences' pages).
StepMeta MetaLayout(int64_t rows, int n_seq, int64_t logit_rows, int64_t pages, int groups = 0,
                    int64_t relay_pages = 0);

// Decodes are shaped by (batch, context bucket), graph or not: the decode kernel's split
// along the sequence follows the bucket (parts past a sequence's end are empty), so a
// graph replay and an eager step of one shape give the same bits. Buckets are 1/16 of the
// next power of two (at least 256 tokens): fine enough that the split is not sized for
// much more than the real length, coarse enough that graphs get reused.
int64_t ContextBucket(int64_t tokens);

// Step::typical_tokens for decode rows of `decode_tokens` own tokens in all over `decodes`
// rows whose longest is bucketed to max_bucket: the bucket of their mean, where below
// max_bucket; else 0 (rows of about one length split as the longest does).
int64_t TypicalTokens(int64_t decode_tokens, int decodes, int64_t max_bucket);

// Whether the entry samples a token (or wants its logits).
bool WantsToken(const ForwardEntry& e);

// One step's shape: what the enqueued work depends on besides the metadata's contents.
struct Step {
  int rows = 0, n_seq = 0, logit_rows = 0;
  int decodes = 0;
  int max_new = 0;         // most new rows of one prompt sequence
  int64_t max_prompt_keys = 0;  // most tokens (cached + new) of one prompt sequence (sets the prefill's split)
  int64_t max_tokens = 0;  // bounds every decode row's own pages' tokens (sets the decode kernel's split)
  // The decode rows' mean own tokens, bucketed (ContextBucket), where below max_tokens; else
  // 0. It sets the split too (parts no longer than it: one long row among short ones is
  // split as finely as they are), so it is part of the graph key.
  int64_t typical_tokens = 0;
  // Relay groups (none without relay attention): their number, rows, largest group, and
  // the bucket (ContextBucket) of their longest prefix.
  int groups = 0, grouped_rows = 0, max_group_rows = 0;
  int64_t prefix_bucket = 0;
  StepMeta meta{};
};

// The step's graph key.
inline GraphShape GraphShapeOf(const Step& s) {
  return GraphShape{s.rows, s.max_tokens, s.groups, s.grouped_rows, s.max_group_rows, s.prefix_bucket, s.typical_tokens};
}

struct StepPlan {
  Step step;
  int64_t rows = 0, logit_rows = 0;  // the step's, before narrowing
  bool graph = false;                // decodes only, no logits out, graphs on: a graph runs it
  std::vector<size_t> order;         // entries of the batch in step order
  std::vector<int> group_rows;       // relay groups' first rows, then grouped_rows
};

// Checks `batch` (sequences of `pool`, tokens in the vocabulary and within each sequence's
// capacity; InvalidArgument naming what is wrong otherwise), orders it and sizes the step.
// A batch with no tokens leaves plan->rows 0: nothing to run. `use_graphs`: whether the
// model may run a decode-only step as a graph (its page list is then sized for the bucket);
// `relay_min_saved_tokens`: decodes on a shared prefix are grouped for relay attention when
// the group saves at least this many tokens' reads ((rows - 1) x prefix tokens); negative:
// never.
absl::Status PlanStep(absl::Span<const ForwardEntry> batch, const ModelConfig& config, const KvPool& pool,
                      bool use_graphs, int64_t relay_min_saved_tokens, StepPlan* plan);

// Writes the plan's index arrays into `host_meta` (plan.step.meta.bytes of it). Returns,
// for each sampled row in order, the batch entry it belongs to.
std::vector<size_t> PackStep(absl::Span<const ForwardEntry> batch, const StepPlan& plan, const KvPool& pool,
                             std::byte* host_meta);

}  // namespace strata::model::cuda_internal

#endif  // STRATA_MODEL_CUDA_STEP_PLAN_H_
