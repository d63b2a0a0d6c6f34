// Runs a planned batch through the engine beside chat traffic: prompts go in group by
// group in the plan's order, as many at a time as the KV memory holds (the group prefixes
// in use plus each running prompt's own tokens and answer, within a share of the
// backend's KV capacity: BatchLLM's memory-centric token batching; the step's token
// budget is the engine's). Each group's prefix is computed once and read by its members
// (engine batch turns); when the group's last prompt ends its prefix is freed. Results
// come back as prompts finish; a prompt that fails gets its own error and the rest go on.
#ifndef STRATA_BATCH_BATCH_RUNNER_H_
#define STRATA_BATCH_BATCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "batch/batch_plan.h"
#include "engine/engine.h"
#include "engine/turn.h"

namespace strata::batch {

struct RunnerOptions {
  Planning planning = Planning::kGlobal;
  // A shared prefix shorter than this is not used (PlanOptions::min_prefix_tokens).
  int64_t min_prefix_tokens = 16;
  // The share of the backend's KV capacity the batch's prompts in flight may hold; the
  // rest stays for chat turns.
  double kv_fraction = 0.8;
  // Prompts submitted and not ended, at most (the engine's queue is bounded too).
  int max_in_flight = 256;
};

// One prompt's outcome. On error only `index` and `status` are set.
struct ItemResult {
  int index = 0;  // into the items given to Run
  absl::Status status;
  std::vector<int32_t> token_ids;
  std::string text;
  engine::TurnUsage usage;
  engine::FinishReason finish = engine::FinishReason::kStop;
};

struct RunSummary {
  Plan plan;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t generated_tokens = 0;
  double seconds = 0;  // from the first submission to the last result
};

class BatchRunner {
 public:
  // `engine` must outlive the runner. Batch turns are the engine's (TurnRequest::batch) of
  // `tenant`, under session IDs no client can send.
  BatchRunner(engine::Engine* engine, std::string tenant, RunnerOptions options);

  // Plans `items` (their prompt, max_new_tokens, sampling and stop set; key, system part
  // and batch flag are the runner's), hands the plan to `on_plan` (when given), and runs
  // them, calling `on_result` on this thread as each ends, in the order they end.
  // `stop()` is polled: when it says true, prompts not yet ended are cancelled and
  // reported as Cancelled. An item whose prompt is empty is reported right
  // after the plan (InvalidArgument) and not planned. Blocks until every item has a
  // result.
  RunSummary Run(std::vector<engine::TurnRequest> items, const std::function<void(ItemResult)>& on_result,
                 const std::function<bool()>& stop = [] { return false; },
                 const std::function<void(const Plan&)>& on_plan = nullptr);

 private:
  engine::Engine* engine_;
  const std::string tenant_;
  const RunnerOptions options_;
};

}  // namespace strata::batch

#endif  // STRATA_BATCH_BATCH_RUNNER_H_
