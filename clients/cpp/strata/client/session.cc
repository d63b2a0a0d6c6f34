#include "strata/client/session.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace strata::client {

// Cancels the call of a turn that runs past its deadline: one thread, waiting
// for the deadline armed for the turn in progress. The call is cancelled under
// mu_, and the turn disarms (under mu_) before its context may go, so a cancel
// never reaches a context that is gone.
class TurnWatchdog {
 public:
  TurnWatchdog() : thread_([this] { Run(); }) {}
  ~TurnWatchdog() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      changed_.Signal();
    }
    thread_.join();
  }

  // Cancels `context` at `deadline` unless Disarm() comes first.
  void Arm(grpc::ClientContext* context, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    context_ = context;
    deadline_ = deadline;
    fired_ = false;
    changed_.Signal();
  }
  // Stops watching; true if the deadline passed and the call was cancelled.
  bool Disarm() {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    return fired_;
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      if (context_ != nullptr && absl::Now() >= deadline_) {
        context_->TryCancel();
        context_ = nullptr;
        fired_ = true;
        continue;
      }
      changed_.WaitWithDeadline(&mu_, context_ != nullptr ? deadline_ : absl::InfiniteFuture());
    }
  }

  absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on Arm and on stop
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it starts once the fields above are made
};

namespace {

// How long the destructor waits for the server to end a half-closed stream (a
// round trip when it is there) before it cancels the stream.
constexpr absl::Duration kCloseWait = absl::Seconds(1);

// Takes one event of an answer into `turn`; true for its last (`done`).
bool Take(const v1::ChatEvent& event, const std::function<void(std::string_view)>& on_text, Turn& turn,
          bool& started) {
  if (event.has_delta()) {
    started = true;
    turn.answer += event.delta().text();
    if (on_text && !event.delta().text().empty()) on_text(event.delta().text());
  }
  if (!event.has_done()) return false;
  turn.done = event.done();
  return true;
}

}  // namespace

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

Session::~Session() {
  if (stream_ == nullptr) return;
  // A half-close ends the stream with OK at once when the server is there; one
  // that is gone or hangs must not hold the caller.
  watchdog_->Arm(stream_context_.get(), absl::Now() + kCloseWait);
  stream_->WritesDone();
  stream_->Finish();
  watchdog_->Disarm();
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

void Session::SetUp(grpc::ClientContext& context) const {
  context.AddMetadata(kSessionHeader, options_.session_id);
  if (!options_.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options_.api_key);
  context.set_wait_for_ready(options_.wait_for_ready);
}

absl::StatusOr<Turn> Session::Send(std::string_view user_text, const OnText& on_text) {
  messages_.emplace_back("user", std::string(user_text));
  const v1::ChatRequest request = Request();
  Turn turn;
  for (int attempt = 0;; ++attempt) {
    turn = Turn{.attempts = attempt + 1};
    bool started = false;
    const grpc::Status status = options_.stream_turns ? StreamTurn(request, on_text, turn, started)
                                                      : CallTurn(request, on_text, turn, started);
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

grpc::Status Session::CallTurn(const v1::ChatRequest& request, const OnText& on_text, Turn& turn, bool& started) {
  grpc::ClientContext context;
  SetUp(context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  auto reader = stub_->Chat(&context, request);
  v1::ChatEvent event;
  while (reader->Read(&event)) Take(event, on_text, turn, started);
  return reader->Finish();
}

grpc::Status Session::StreamTurn(const v1::ChatRequest& request, const OnText& on_text, Turn& turn, bool& started) {
  if (watchdog_ == nullptr) watchdog_ = std::make_unique<TurnWatchdog>();
  const bool reused = stream_ != nullptr;
  if (!reused) {
    stream_context_ = std::make_unique<grpc::ClientContext>();
    SetUp(*stream_context_);
  }
  // Armed before the stream opens: with wait_for_ready, opening waits for the
  // server, and the turn's timeout covers that wait as a call's deadline does.
  watchdog_->Arm(stream_context_.get(), absl::Now() + options_.timeout);
  if (!reused) stream_ = stub_->ChatSession(stream_context_.get());
  const bool written = stream_->Write(request);
  bool done = false;
  v1::ChatEvent event;
  while (written && !done && stream_->Read(&event)) done = Take(event, on_text, turn, started);
  if (done) {
    // Answered in full; a timeout that fired just after its last event has
    // cancelled the stream, so the next turn opens a new one.
    if (watchdog_->Disarm()) CloseStream();
    return grpc::Status::OK;
  }
  // Still watched: a Finish that waits on the server ends by the turn's deadline.
  grpc::Status status = CloseStream();
  const bool timed_out = watchdog_->Disarm();
  if (timed_out && status.error_code() == grpc::StatusCode::CANCELLED) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        absl::StrCat("the turn passed its timeout (", absl::FormatDuration(options_.timeout), ")"));
  }
  if (started) {
    return status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended before the turn's done event")
                       : status;
  }
  // Nothing of the turn came back. A stream that took no request (a server
  // that ended it between turns) or that ended OK never read the turn: the
  // server answers each request it reads or fails the stream.
  if (status.ok() || (reused && !written)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the session's stream ended before the turn was answered",
                                     status.ok() ? "" : ": ", status.error_message()));
  }
  return status;
}

grpc::Status Session::CloseStream() {
  grpc::Status status = stream_->Finish();
  stream_.reset();
  stream_context_.reset();
  return status;
}

}  // namespace strata::client
