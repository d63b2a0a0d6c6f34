#include "server/chat_service.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

}  // namespace

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

grpc::Status ChatServiceImpl::ChatSession(grpc::ServerContext* context,
                                          grpc::ServerReaderWriter<v1::ChatEvent, v1::ChatRequest>* stream) {
  v1::ChatRequest request;
  for (;;) {
    proto::last_request_malformed = false;
    if (!stream->Read(&request)) break;
    if (grpc::Status s = DoChat(context, request, stream); !s.ok()) return s;
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  }
  return proto::last_request_malformed ? proto::MalformedRequest("strata::v1::ChatRequest") : grpc::Status::OK;
}

grpc::Status ChatServiceImpl::DoChat(grpc::ServerContext* context, const v1::ChatRequest& request,
                                     grpc::internal::WriterInterface<v1::ChatEvent>* writer) {
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
  if (absl::Status s = prompts_.Build(*tenant, request, &turn); !s.ok()) return ToGrpcStatus(s);
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
    if (client_gone) {
      // Drained until the engine lets go of the turn: its last event (a turn that finished
      // in the step the cancel came in) ends the call; no event follows it.
      if (event.done.has_value()) {
        return WhyOver(*context, arrival) == engine::CancelReason::kDeadline
                   ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the call's deadline passed")
                   : grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
      continue;
    }
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
