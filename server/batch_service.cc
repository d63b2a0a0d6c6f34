#include "server/batch_service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/chat_service.h"
#include "server/status_map.h"

namespace strata::server {
namespace {

v1::FinishReason ToProto(engine::FinishReason f) {
  return f == engine::FinishReason::kLength ? v1::FINISH_REASON_LENGTH : v1::FINISH_REASON_STOP;
}

batch::Planning FromProto(v1::BatchPlanning p) {
  switch (p) {
    case v1::BATCH_PLANNING_FIRST_LEVEL: return batch::Planning::kFirstLevel;
    case v1::BATCH_PLANNING_NONE: return batch::Planning::kNone;
    default: return batch::Planning::kGlobal;
  }
}

// A batch prompt is a chat turn without a session: built by the same rules. A
// conversation that does not fit the context is refused, not cut.
v1::ChatRequest AsChat(const v1::BatchPrompt& p) {
  v1::ChatRequest c;
  *c.mutable_messages() = p.messages();
  *c.mutable_token_ids() = p.token_ids();
  c.set_max_new_tokens(p.max_new_tokens());
  c.set_context_overflow(v1::CONTEXT_OVERFLOW_REJECT);
  return c;
}

v1::BatchEvent ErrorResult(const std::string& id, int index, const absl::Status& status) {
  v1::BatchEvent e;
  v1::BatchResult* r = e.mutable_result();
  r->set_id(id);
  r->set_index(static_cast<uint32_t>(index));
  r->mutable_error()->set_code(static_cast<int32_t>(ToGrpcStatus(status).error_code()));
  r->mutable_error()->set_message(std::string(status.message()));
  return e;
}

}  // namespace

BatchServiceImpl::BatchServiceImpl(engine::Engine* engine, const PromptBuilder* prompts, const ApiKeys* api_keys,
                                   metrics::Registry* registry, BatchServiceOptions options)
    : engine_(engine), prompts_(prompts), api_keys_(api_keys), options_(options) {
  auto& prompts_total = registry->AddCounter("strata_batch_prompts_total",
                                             "Prompts of BatchGenerate calls that ended, by outcome: completed, failed.");
  completed_ = &prompts_total.WithLabels({{"outcome", "completed"}});
  failed_ = &prompts_total.WithLabels({{"outcome", "failed"}});
  saved_tokens_ = &registry
                       ->AddCounter("strata_batch_saved_prompt_tokens_total",
                                    "Prompt tokens of batches not computed: read from their group's shared prefix "
                                    "as planned.")
                       .WithLabels({});
}

grpc::Status BatchServiceImpl::BatchGenerate(grpc::ServerContext* context,
                                             grpc::ServerReaderWriter<v1::BatchEvent, v1::BatchRequest>* stream) {
  auto tenant = TenantOf(*context, *api_keys_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());

  // The whole batch first: it is planned as a whole.
  v1::BatchOptions options;
  std::vector<v1::BatchPrompt> prompts;
  v1::BatchRequest request;
  proto::last_request_malformed = false;
  for (bool first = true; stream->Read(&request); first = false) {
    if (request.has_options()) {
      if (!first) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "options come only as the first message");
      options = request.options();
    } else if (request.has_prompt()) {
      if (static_cast<int>(prompts.size()) >= options_.max_prompts) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("a batch holds at most ", options_.max_prompts,
                                         " prompts (--max_batch_prompts); split it"));
      }
      prompts.push_back(std::move(*request.mutable_prompt()));
    } else {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a BatchRequest holds options or a prompt");
    }
  }
  // A message that did not parse ends the reads as the client's close would: nothing runs.
  if (proto::last_request_malformed) return proto::MalformedRequest("strata::v1::BatchRequest");
  if (prompts.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the batch is empty: send at least one prompt");
  }
  if (!v1::BatchPlanning_IsValid(options.planning())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("planning ", options.planning(), " is none of GLOBAL, FIRST_LEVEL, NONE"));
  }

  // Each prompt as a turn; one that cannot be gets its own error.
  const absl::Time arrival = absl::Now();
  std::vector<engine::TurnRequest> items;
  std::vector<int> index_of;  // item -> prompt
  std::vector<v1::BatchEvent> refused;
  absl::flat_hash_map<std::string, int> ids;
  for (int i = 0; i < static_cast<int>(prompts.size()); ++i) {
    const v1::BatchPrompt& p = prompts[static_cast<size_t>(i)];
    auto refuse = [&](const absl::Status& s) { refused.push_back(ErrorResult(p.id(), i, s)); };
    if (p.id().empty() || p.id().size() > kMaxBatchIdBytes) {
      refuse(absl::InvalidArgumentError(absl::StrCat("id must be 1..", kMaxBatchIdBytes, " bytes")));
      continue;
    }
    if (auto [it, fresh] = ids.emplace(p.id(), i); !fresh) {
      refuse(absl::InvalidArgumentError(absl::StrCat("id '", p.id(), "' is prompt ", it->second, "'s too")));
      continue;
    }
    if (p.messages_size() > 0 && p.token_ids_size() > 0) {
      refuse(absl::InvalidArgumentError("give either messages or token_ids, not both"));
      continue;
    }
    if (p.messages_size() > kMaxMessages) {
      refuse(absl::InvalidArgumentError(absl::StrCat("at most ", kMaxMessages, " messages")));
      continue;
    }
    engine::TurnRequest turn;
    if (absl::Status s = prompts_->Build(*tenant, AsChat(p), &turn); !s.ok()) {
      refuse(s);
      continue;
    }
    turn.max_new_tokens = p.max_new_tokens() > 0 ? p.max_new_tokens()
                                                 : std::min(kDefaultBatchMaxNewTokens, engine_->max_new_tokens_limit());
    turn.sampling.temperature = p.sampling().temperature();
    turn.sampling.top_p = p.sampling().top_p() == 0 ? 1.0f : p.sampling().top_p();
    turn.sampling.seed = p.sampling().seed();
    turn.stop.assign(p.stop().begin(), p.stop().end());
    turn.arrival = arrival;
    items.push_back(std::move(turn));
    index_of.push_back(i);
  }

  batch::RunnerOptions runner_options = options_.runner;
  runner_options.planning = FromProto(options.planning());
  const size_t planned_prompts = items.size();
  bool client_gone = false;
  auto write = [&](const v1::BatchEvent& e) {
    if (!client_gone && !stream->Write(e)) client_gone = true;
  };
  auto send_plan = [&](const batch::Plan& plan) {
    v1::BatchEvent e;
    v1::BatchPlanInfo* info = e.mutable_plan();
    info->set_prompts(static_cast<uint32_t>(planned_prompts));
    int groups = 0;
    for (const batch::PlanGroup& g : plan.groups) groups += g.prefix_tokens > 0;
    info->set_groups(static_cast<uint32_t>(groups));
    info->set_prompt_tokens(static_cast<uint64_t>(plan.prompt_tokens));
    info->set_computed_tokens(static_cast<uint64_t>(plan.computed_tokens));
    info->set_ideal_computed_tokens(static_cast<uint64_t>(plan.ideal_computed_tokens));
    info->set_token_saving_ratio(plan.saving_ratio());
    info->set_ideal_token_saving_ratio(plan.ideal_saving_ratio());
    write(e);
    for (const v1::BatchEvent& r : refused) write(r);
  };
  auto on_result = [&](batch::ItemResult r) {
    const int index = index_of[static_cast<size_t>(r.index)];
    const std::string& id = prompts[static_cast<size_t>(index)].id();
    if (!r.status.ok()) {
      write(ErrorResult(id, index, r.status));
      return;
    }
    v1::BatchEvent e;
    v1::BatchResult* out = e.mutable_result();
    out->set_id(id);
    out->set_index(static_cast<uint32_t>(index));
    out->set_text(std::move(r.text));
    out->mutable_token_ids()->Add(r.token_ids.begin(), r.token_ids.end());
    out->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(r.usage.prompt_tokens));
    out->mutable_usage()->set_cached_tokens(static_cast<uint32_t>(r.usage.cached_tokens));
    out->mutable_usage()->set_computed_tokens(static_cast<uint32_t>(r.usage.computed_tokens));
    out->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(r.usage.completion_tokens));
    out->set_finish_reason(ToProto(r.finish));
    write(e);
  };
  batch::BatchRunner runner(engine_, *tenant, runner_options);
  const batch::RunSummary summary =
      runner.Run(std::move(items), on_result, [&] { return client_gone || context->IsCancelled(); }, send_plan);

  const int64_t failed = summary.failed + static_cast<int64_t>(refused.size());
  completed_->Increment(static_cast<double>(summary.completed));
  failed_->Increment(static_cast<double>(failed));
  saved_tokens_->Increment(static_cast<double>(summary.plan.prompt_tokens - summary.plan.computed_tokens));
  if (client_gone || context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  v1::BatchEvent done;
  done.mutable_summary()->set_completed(static_cast<uint32_t>(summary.completed));
  done.mutable_summary()->set_failed(static_cast<uint32_t>(failed));
  done.mutable_summary()->set_generated_tokens(static_cast<uint64_t>(summary.generated_tokens));
  done.mutable_summary()->set_seconds(summary.seconds);
  stream->Write(done);
  return grpc::Status::OK;
}

}  // namespace strata::server
