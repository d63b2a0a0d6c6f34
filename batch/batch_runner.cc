#include "batch/batch_runner.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace strata::batch {
namespace {

// A batch's prompts run under session IDs no client can send (a control character).
std::string SessionOf(uint64_t run, int item) { return absl::StrCat("\x01", "batch/", run, "/", item); }

}  // namespace

BatchRunner::BatchRunner(engine::Engine* engine, std::string tenant, RunnerOptions options)
    : engine_(engine), tenant_(std::move(tenant)), options_(options) {}

RunSummary BatchRunner::Run(std::vector<engine::TurnRequest> items, const std::function<void(ItemResult)>& on_result,
                            const std::function<bool()>& stop,
                            const std::function<void(const Plan&)>& on_plan) {
  static std::atomic<uint64_t> next_run{0};
  const uint64_t run = next_run++;
  RunSummary summary;
  auto report = [&](ItemResult r) {
    if (r.status.ok()) {
      ++summary.completed;
      summary.generated_tokens += r.usage.completion_tokens;
    } else {
      ++summary.failed;
    }
    on_result(std::move(r));
  };

  // The plan, over the prompts that can be planned.
  std::vector<int> planned, empty;
  std::vector<PlanPrompt> view;
  for (int i = 0; i < static_cast<int>(items.size()); ++i) {
    const engine::TurnRequest& t = items[static_cast<size_t>(i)];
    if (t.prompt.empty()) {
      empty.push_back(i);
      continue;
    }
    planned.push_back(i);
    view.push_back(PlanPrompt{t.prompt, t.max_new_tokens});
  }
  const model::ModelBackend& model = engine_->model();
  PlanOptions plan_options{.planning = options_.planning, .min_prefix_tokens = options_.min_prefix_tokens};
  // A backend that computes prefixes per sequence shares nothing.
  if (!model.shares_prefixes()) plan_options.min_prefix_tokens = std::numeric_limits<int64_t>::max();
  summary.plan = MakePlan(view, plan_options);
  if (on_plan) on_plan(summary.plan);
  for (int i : empty) report(ItemResult{.index = i, .status = absl::InvalidArgumentError("the prompt is empty")});

  struct Group {
    int64_t prefix = 0;
    int remaining = 0;  // members without a result
    bool active = false;
    std::vector<int32_t> prefix_tokens;
  };
  struct Flight {
    int item;
    int group;
    int64_t reserve;  // KV tokens it holds
    std::shared_ptr<engine::TurnStream> stream;
    ItemResult result;
  };
  std::vector<Group> groups;
  std::vector<std::pair<int, int>> order;  // (item, group) in run order
  for (const PlanGroup& g : summary.plan.groups) {
    const int gi = static_cast<int>(groups.size());
    groups.push_back(Group{.prefix = g.prefix_tokens, .remaining = static_cast<int>(g.members.size())});
    const auto& first = items[static_cast<size_t>(planned[static_cast<size_t>(g.members.front())])].prompt;
    groups.back().prefix_tokens.assign(first.begin(), first.begin() + g.prefix_tokens);
    for (int m : g.members) order.emplace_back(planned[static_cast<size_t>(m)], gi);
  }

  const int64_t budget = std::max<int64_t>(
      1, static_cast<int64_t>(options_.kv_fraction * static_cast<double>(model.kv_capacity_tokens())));
  int64_t in_use = 0;
  std::vector<Flight> flights;
  size_t next = 0;
  bool stopping = false;
  auto member_done = [&](int gi) {
    Group& g = groups[static_cast<size_t>(gi)];
    if (--g.remaining > 0 || !g.active) return;
    in_use -= g.prefix;
    if (g.prefix > 0) engine_->ReleaseBatchPrefix(tenant_, g.prefix_tokens);
  };
  const absl::Time start = absl::Now();
  while (next < order.size() || !flights.empty()) {
    if (!stopping && stop()) {
      stopping = true;
      for (Flight& f : flights) f.stream->Cancel();
    }
    // Submit what the KV memory and the engine's queue take.
    while (next < order.size() && static_cast<int>(flights.size()) < options_.max_in_flight) {
      const auto [item, gi] = order[next];
      if (stopping) {
        report(ItemResult{.index = item, .status = absl::CancelledError("the batch was cancelled")});
        member_done(gi);
        ++next;
        continue;
      }
      const Group& g = groups[static_cast<size_t>(gi)];
      engine::TurnRequest turn = items[static_cast<size_t>(item)];
      const int64_t prompt = static_cast<int64_t>(turn.prompt.size());
      // (A prompt past the context is refused by the engine; it holds no answer's room.)
      const int64_t answer =
          std::clamp<int64_t>(turn.max_new_tokens, 0, std::max<int64_t>(0, engine_->context_tokens() - prompt));
      const int64_t own = prompt - g.prefix + answer;
      const int64_t need = own + (g.active ? 0 : g.prefix);
      if (!flights.empty() && in_use + need > budget) break;
      turn.key = storage::SessionKey{tenant_, SessionOf(run, item)};
      turn.system_tokens = g.prefix;
      turn.batch = true;
      auto stream = engine_->Submit(std::move(turn));
      if (!stream.ok() && absl::IsResourceExhausted(stream.status()) && !flights.empty()) break;  // queue full
      ++next;
      if (!stream.ok()) {
        report(ItemResult{.index = item, .status = stream.status()});
        member_done(gi);
        continue;
      }
      if (!g.active) {
        groups[static_cast<size_t>(gi)].active = true;
        in_use += g.prefix;
      }
      in_use += own;
      flights.push_back(Flight{.item = item, .group = gi, .reserve = own, .stream = *std::move(stream)});
      flights.back().result.index = item;
    }
    // Collect what the engine produced.
    bool progressed = false;
    for (auto it = flights.begin(); it != flights.end();) {
      engine::TurnStream::Event e;
      bool ended = false;
      while (!ended && it->stream->Next(&e, absl::ZeroDuration())) {
        progressed = true;
        ItemResult& r = it->result;
        r.token_ids.insert(r.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
        r.text += e.text;
        if (!e.error.ok()) {
          r = ItemResult{.index = it->item, .status = e.error};
          ended = true;
        } else if (e.done.has_value()) {
          r.usage = e.done->usage;
          r.finish = e.done->finish;
          ended = true;
        }
      }
      if (!ended) {
        ++it;
        continue;
      }
      in_use -= it->reserve;
      const int gi = it->group;
      report(std::move(it->result));
      it = flights.erase(it);
      member_done(gi);
    }
    if (!progressed) absl::SleepFor(absl::Microseconds(500));
  }
  summary.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return summary;
}

}  // namespace strata::batch
