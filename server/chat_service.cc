#include "server/chat_service.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/context_window.h"
#include "server/auth.h"
#include "server/status_map.h"

namespace strata::server {
namespace {

v1::Tier ToProto(storage::Tier tier) {
  switch (tier) {
    case storage::Tier::kNone: return v1::TIER_NONE;
    case storage::Tier::kHbm: return v1::TIER_HBM;
    case storage::Tier::kHost: return v1::TIER_HOST;
    case storage::Tier::kSsd: return v1::TIER_SSD;
  }
  return v1::TIER_NONE;
}

// Why the call that arrived at `arrival` is over; the engine fails (and counts) its turn
// so. gRPC cancels a call whose deadline passed as it does one whose client went away, and
// the client's own timer often cancels it first: the timeout the server was sent is
// rounded up (by up to 1%) and came later. So a call over within that margin of its
// deadline ran out of time.
engine::CancelReason WhyOver(const grpc::ServerContext& context, absl::Time arrival) {
  if (context.deadline() == std::chrono::system_clock::time_point::max()) return engine::CancelReason::kClient;
  const absl::Time deadline = absl::FromChrono(context.deadline());
  const absl::Duration margin = (deadline - arrival) / 100 + absl::Milliseconds(5);
  return absl::Now() + margin >= deadline ? engine::CancelReason::kDeadline : engine::CancelReason::kClient;
}

// The cut conversation is what the turn computes.
void TakeCut(engine::Truncation cut, engine::TurnRequest* turn) {
  turn->prompt = std::move(cut.prompt);
  turn->truncated_tokens = cut.dropped_tokens;
  turn->kept_prefix_tokens = cut.kept_prefix_tokens;
}

}  // namespace

engine::ContextOverflow ChatServiceImpl::Overflow(const v1::ChatRequest& request) const {
  switch (request.context_overflow()) {
    case v1::CONTEXT_OVERFLOW_TRUNCATE: return engine::ContextOverflow::kTruncate;
    case v1::CONTEXT_OVERFLOW_REJECT: return engine::ContextOverflow::kReject;
    default: break;
  }
  // token_ids are cut only after a prefix their client names; messages by the server's default.
  if (request.messages_size() == 0) {
    return request.has_keep_prefix_tokens() ? engine::ContextOverflow::kTruncate : engine::ContextOverflow::kReject;
  }
  return engine_->context_window().overflow;
}

absl::Status ChatServiceImpl::BuildPrompt(const std::string& tenant, const v1::ChatRequest& request,
                                          engine::TurnRequest* turn) const {
  if (!v1::ContextOverflow_IsValid(request.context_overflow())) {
    return absl::InvalidArgumentError(absl::StrCat("context_overflow ", request.context_overflow(),
                                                   " is none of UNSPECIFIED, TRUNCATE, REJECT"));
  }
  std::optional<SystemPromptRegistry::Registration> system;
  if (!request.system_prompt_id().empty()) {
    auto registered = prompts_->Find(tenant, request.system_prompt_id());
    if (!registered.ok()) return registered.status();
    system = *std::move(registered);
  }
  if (request.messages_size() > 0) {
    if (request.system_prefix_tokens() > 0) {
      return absl::InvalidArgumentError("system_prefix_tokens is for token_ids; messages name their system part");
    }
    std::vector<text::ChatMessage> messages;
    if (system.has_value()) {
      if (system->messages.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("system prompt ", request.system_prompt_id(),
                                                       " is known by its token IDs: send token_ids with it"));
      }
      messages = system->messages;
    }
    messages.reserve(messages.size() + static_cast<size_t>(request.messages_size()));
    for (const v1::Message& m : request.messages()) {
      if (system.has_value() && m.role() == "system") {
        return absl::InvalidArgumentError("with system_prompt_id the system messages come from the prompt");
      }
      messages.push_back({m.role(), m.content()});
    }
    if (request.has_keep_prefix_tokens()) {
      return absl::InvalidArgumentError("keep_prefix_tokens is for token_ids; messages keep their system part");
    }
    auto rendered = tokenizer_->RenderChat(messages);
    if (!rendered.ok()) return rendered.status();
    turn->prompt = *std::move(rendered);
    if (Overflow(request) == engine::ContextOverflow::kTruncate) {
      size_t system_messages = 0;
      while (system_messages < messages.size() && messages[system_messages].role == "system") ++system_messages;
      std::vector<text::ChatMessage> kept;
      const engine::ContextWindowOptions& cw = engine_->context_window();
      auto cut = engine::TruncateMessages(*tokenizer_, messages, system_messages, std::move(turn->prompt),
                                          request.max_new_tokens(), engine_->context_tokens(), cw.ratio, &kept);
      if (!cut.ok()) return cut.status();
      if (cut->dropped_tokens > 0) messages = std::move(kept);
      TakeCut(*std::move(cut), turn);
    }
    // A registered prompt's part is known; another conversation's is recognised. Where the
    // template did not render it as a prefix of the prompt, it is computed inline.
    turn->system_tokens = system.has_value() ? SharedPrefixTokens(system->tokens, turn->prompt)
                                             : system_parts_.Recognise(messages, turn->prompt);
  } else {
    if (system.has_value()) turn->prompt = system->tokens;
    turn->prompt.insert(turn->prompt.end(), request.token_ids().begin(), request.token_ids().end());
    turn->system_tokens = system.has_value() ? static_cast<int64_t>(system->tokens.size()) : 0;
    if (request.system_prefix_tokens() > 0) {
      if (system.has_value()) {
        return absl::InvalidArgumentError("give system_prompt_id or system_prefix_tokens, not both");
      }
      if (request.system_prefix_tokens() >= static_cast<uint32_t>(request.token_ids_size())) {
        return absl::InvalidArgumentError(absl::StrCat("system_prefix_tokens (", request.system_prefix_tokens(),
                                                       ") must be less than the tokens sent (",
                                                       request.token_ids_size(), ")"));
      }
      turn->system_tokens = request.system_prefix_tokens();
    }
    if (request.has_keep_prefix_tokens() &&
        request.keep_prefix_tokens() >= static_cast<uint32_t>(request.token_ids_size())) {
      return absl::InvalidArgumentError(absl::StrCat("keep_prefix_tokens (", request.keep_prefix_tokens(),
                                                     ") must be less than the tokens sent (", request.token_ids_size(),
                                                     ")"));
    }
    if (Overflow(request) == engine::ContextOverflow::kTruncate) {
      // Without a keep prefix only an explicit TRUNCATE gets here (Overflow).
      if (!request.has_keep_prefix_tokens()) {
        return absl::InvalidArgumentError("token_ids are cut only after a prefix the client names: give "
                                          "keep_prefix_tokens");
      }
      // A shared prompt is always kept: its KV is every session's on it.
      const int64_t keep = (system.has_value() ? static_cast<int64_t>(system->tokens.size()) : 0) +
                           std::max<int64_t>(request.keep_prefix_tokens(), request.system_prefix_tokens());
      auto cut = engine::TruncateTokens(std::move(turn->prompt), keep, request.max_new_tokens(),
                                        engine_->context_tokens(), engine_->context_window().ratio);
      if (!cut.ok()) return cut.status();
      TakeCut(*std::move(cut), turn);
    }
  }
  if (turn->prompt.empty() || (request.messages_size() == 0 && request.token_ids_size() == 0)) {
    return absl::InvalidArgumentError("the conversation is empty: give messages or token_ids");
  }
  return absl::OkStatus();
}

absl::Status ValidateSessionId(const std::string& session_id) {
  if (session_id.empty()) return absl::InvalidArgumentError("session_id is empty");
  if (session_id.size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("session_id is ", session_id.size(),
                                                   " bytes; at most ", kMaxSessionIdBytes));
  }
  for (char c : session_id) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("session_id holds a control character");
    }
  }
  return absl::OkStatus();
}

grpc::Status ChatServiceImpl::Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                                   grpc::ServerWriter<v1::ChatEvent>* writer) {
  return DoChat(context, *request, writer);
}

grpc::Status ChatServiceImpl::DoChat(grpc::ServerContext* context, const v1::ChatRequest& request,
                                     grpc::ServerWriter<v1::ChatEvent>* writer) {
  const absl::Time arrival = absl::Now();
  auto tenant = TenantOf(*context, *api_keys_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status s = ValidateSessionId(request.session_id()); !s.ok()) return ToGrpcStatus(s);
  if (auto header = context->client_metadata().find(kSessionHeader); header != context->client_metadata().end()) {
    const absl::string_view routed(header->second.data(), header->second.size());
    if (routed != request.session_id()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("the ", kSessionHeader, " header ('", routed,
                                       "') is not the request's session_id ('", request.session_id(), "')"));
    }
  }

  engine::TurnRequest turn;
  turn.key = storage::SessionKey{*tenant, request.session_id()};
  turn.arrival = arrival;
  if (request.messages_size() > 0 && request.token_ids_size() > 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "give either messages or token_ids, not both");
  }
  if (request.messages_size() > kMaxMessages) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("at most ", kMaxMessages, " messages"));
  }
  if (absl::Status s = BuildPrompt(*tenant, request, &turn); !s.ok()) return ToGrpcStatus(s);
  turn.max_new_tokens = request.max_new_tokens();  // validated by the engine, as sent
  turn.sampling.temperature = request.sampling().temperature();
  turn.sampling.top_p = request.sampling().top_p() == 0 ? 1.0f : request.sampling().top_p();
  turn.sampling.seed = request.sampling().seed();
  turn.stop.assign(request.stop().begin(), request.stop().end());
  const storage::SessionKey key = turn.key;

  auto stream = engine_->Submit(std::move(turn));
  if (!stream.ok()) return ToGrpcStatus(stream.status());

  bool client_gone = false;
  for (;;) {
    engine::TurnStream::Event event;
    if (!(*stream)->Next(&event, absl::Milliseconds(50))) {
      if (context->IsCancelled() && !client_gone) {
        client_gone = true;
        (*stream)->Cancel(WhyOver(*context, arrival));
      }
      continue;
    }
    // A call whose deadline passed fails with DeadlineExceeded, not as a client's cancel.
    if (!event.error.ok()) return ToGrpcStatus(event.error);
    if (client_gone) continue;  // drain until the engine lets go of the turn
    v1::ChatEvent out;
    if (!event.token_ids.empty() || !event.text.empty()) {
      v1::TokenDelta* delta = out.mutable_delta();
      delta->mutable_token_ids()->Add(event.token_ids.begin(), event.token_ids.end());
      delta->set_text(event.text);
      if (!writer->Write(out)) {
        client_gone = true;
        (*stream)->Cancel(WhyOver(*context, arrival));
        continue;
      }
    }
    if (event.done.has_value()) {
      const engine::TurnResult& r = *event.done;
      v1::ChatEvent done_event;
      v1::ChatDone* done = done_event.mutable_done();
      done->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(r.usage.prompt_tokens));
      done->mutable_usage()->set_cached_tokens(static_cast<uint32_t>(r.usage.cached_tokens));
      done->mutable_usage()->set_computed_tokens(static_cast<uint32_t>(r.usage.computed_tokens));
      done->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(r.usage.completion_tokens));
      done->set_cache_tier(ToProto(r.cache_tier));
      done->set_truncated_tokens(static_cast<uint32_t>(r.truncated_tokens));
      done->set_ttft_ms(r.ttft_ms);
      done->set_finish_reason(r.finish == engine::FinishReason::kLength ? v1::FINISH_REASON_LENGTH
                                                                         : v1::FINISH_REASON_STOP);
      if (request.persist()) {
        // The client asked to wait for durability; this thread waits, the engine does not.
        done->set_persisted(store_ != nullptr && store_->Flush(key, absl::Seconds(30)).ok());
      }
      writer->Write(done_event);
      return grpc::Status::OK;
    }
  }
}

}  // namespace strata::server
