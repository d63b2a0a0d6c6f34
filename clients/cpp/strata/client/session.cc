#include "strata/client/session.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

namespace strata::client {

absl::Status SessionOptions::Validate() const {
  if (session_id.empty() || session_id.size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat("session_id must be 1-128 bytes, not ", session_id.size()));
  }
  if (!system.empty() && !system_prompt_id.empty()) {
    return absl::InvalidArgumentError("give system or system_prompt_id, not both");
  }
  if (max_new_tokens == 0) return absl::InvalidArgumentError("max_new_tokens must be at least 1");
  if (retries < 0) return absl::InvalidArgumentError(absl::StrCat("retries must be >= 0, not ", retries));
  if (timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("timeout must be positive");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Session>> Session::Create(SessionOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (options.target.empty()) return absl::InvalidArgumentError("target (host:port) is empty");
  auto credentials = options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  auto channel = grpc::CreateChannel(options.target, credentials);
  return Create(std::move(options), std::move(channel));
}

absl::StatusOr<std::unique_ptr<Session>> Session::Create(SessionOptions options,
                                                         std::shared_ptr<grpc::Channel> channel) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::unique_ptr<Session>(new Session(std::move(options), std::move(channel)));
}

Session::Session(SessionOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)), stub_(v1::ChatService::NewStub(std::move(channel))) {
  if (!options_.system.empty()) messages_.emplace_back("system", options_.system);
}

v1::ChatRequest Session::Request() const {
  v1::ChatRequest request;
  request.set_session_id(options_.session_id);
  request.set_max_new_tokens(options_.max_new_tokens);
  *request.mutable_sampling() = options_.sampling;
  if (!options_.system_prompt_id.empty()) request.set_system_prompt_id(options_.system_prompt_id);
  for (const auto& [role, content] : messages_) {
    v1::Message* m = request.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return request;
}

absl::StatusOr<Turn> Session::Send(std::string_view user_text, const std::function<void(std::string_view)>& on_text) {
  messages_.emplace_back("user", std::string(user_text));
  const v1::ChatRequest request = Request();
  Turn turn;
  for (int attempt = 0;; ++attempt) {
    turn = Turn{.attempts = attempt + 1};
    grpc::ClientContext context;
    context.AddMetadata(kSessionHeader, options_.session_id);
    if (!options_.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options_.api_key);
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
    context.set_wait_for_ready(options_.wait_for_ready);
    auto reader = stub_->Chat(&context, request);
    bool started = false;
    v1::ChatEvent event;
    while (reader->Read(&event)) {
      if (event.has_delta()) {
        started = true;
        turn.answer += event.delta().text();
        if (on_text && !event.delta().text().empty()) on_text(event.delta().text());
      }
      if (event.has_done()) turn.done = event.done();
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) break;
    // Only a turn that never began may be sent again: one whose text has
    // streamed would be a second, possibly different answer.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !started && attempt < options_.retries) {
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(options_.backoff * (1 << std::min(attempt, 16))));
      continue;
    }
    messages_.pop_back();  // the turn did not happen
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  messages_.emplace_back("assistant", turn.answer);
  return turn;
}

}  // namespace strata::client
