// A conversation with strata, as a gateway holds it: the C++ client library (CMake
// target strata::client; `strata chat` is built on it). The Python kit's Session
// (clients/python/strata/client.py) does the same.
//
//   strata::client::SessionOptions o;
//   o.target = "127.0.0.1:7070";
//   o.session_id = "user-42";
//   auto session = strata::client::Session::Create(o);  // StatusOr
//   auto turn = (*session)->Send("Hello!", [](std::string_view text) { std::cout << text; });
//   if (turn.ok()) std::cout << turn->done.usage().cached_tokens() << " tokens reused\n";
//
// A Session keeps the conversation and resends it whole every turn, with the assistant's
// answers exactly as strata streamed them: that is what lets strata reuse the session's
// KV (an edited history is reused only up to the first changed token). It sends the
// session ID as the `x-session-id` header, so a session-affine proxy (deploy/nginx) keeps
// the session on one replica, and the API key as `authorization: Bearer`.
#ifndef STRATA_CLIENTS_CPP_STRATA_CLIENT_SESSION_H_
#define STRATA_CLIENTS_CPP_STRATA_CLIENT_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/v1/chat.grpc.pb.h"

namespace strata::client {

// The call metadata that carries the session ID; the server checks that it
// equals the request's session_id.
inline constexpr char kSessionHeader[] = "x-session-id";

struct SessionOptions {
  std::string target;      // host:port of a strata server or of a proxy in front of several
  std::string session_id;  // 1-128 bytes, no control characters
  std::string api_key;     // sent as `authorization: Bearer <key>` when non-empty
  // TLS credentials (grpc::SslCredentials); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // A system message the conversation starts with, or the id of a registered
  // system prompt (SystemPromptService) in its place; at most one of the two.
  std::string system;
  std::string system_prompt_id;
  uint32_t max_new_tokens = 256;
  // How each answer is drawn (ChatRequest.sampling): temperature 0 is greedy; the
  // same seed and conversation give the same answer.
  v1::SamplingParams sampling;
  // A turn refused with UNAVAILABLE before any of its answer arrived (a
  // draining or restarting server) is sent again up to `retries` times, after
  // `backoff`, doubled each time. Once text has streamed an error is returned:
  // a turn is never replayed.
  int retries = 4;
  absl::Duration backoff = absl::Milliseconds(250);
  absl::Duration timeout = absl::Seconds(120);  // deadline of each call (each turn's, below)
  // Wait (within `timeout`) for a server that is not reachable yet instead of
  // failing at once.
  bool wait_for_ready = true;
  // Send the turns on one ChatSession stream, opened by the first turn and kept
  // open between turns, instead of a Chat call each: it saves a call's set-up
  // per turn (about 0.3-0.5 ms of TTFT on the H100 machine, docs/BENCHMARKS.md).
  // Each open stream holds one of the server's threads, so use it for sessions
  // that are talking, not for many idle ones. The stream has no deadline:
  // `timeout` bounds each attempt of a turn, and a turn past it cancels the
  // stream (DEADLINE_EXCEEDED). A turn that fails or times out closes the
  // stream and the next turn opens a new one; a stream found broken between
  // turns counts as a turn refused with UNAVAILABLE before its answer began.
  bool stream_turns = false;

  // OK, or INVALID_ARGUMENT naming the field that is wrong.
  absl::Status Validate() const;
};

// One finished turn.
struct Turn {
  std::string answer;  // the whole answer, as it streamed
  v1::ChatDone done;   // usage (prompt, cached, computed tokens), cache tier, TTFT
  int attempts = 0;    // calls (or turns on a stream) made: 1 without retries
};

class TurnWatchdog;  // session.cc: cancels a streamed turn past its timeout

// Not thread-safe: one turn at a time, which is also what strata does with a
// session.
class Session {
 public:
  // Makes the channel (no call yet). Returns the error of options.Validate().
  static absl::StatusOr<std::unique_ptr<Session>> Create(SessionOptions options);
  // The same on a channel the caller shares between sessions (options.target
  // and credentials are then not used).
  static absl::StatusOr<std::unique_ptr<Session>> Create(SessionOptions options,
                                                         std::shared_ptr<grpc::Channel> channel);

  // With stream_turns, half-closes the open stream and waits for the server to
  // end it (a second at most: then it cancels the stream).
  ~Session();

  // Sends `user_text` as the next user message and streams the answer's text to
  // `on_text` (if set) as it arrives; blocks until the turn is done. On success
  // the answer joins the conversation. On failure the conversation is as it
  // was, and the status has the gRPC call's code (absl and gRPC number them
  // alike) and message; a turn past `timeout` is DEADLINE_EXCEEDED.
  absl::StatusOr<Turn> Send(std::string_view user_text, const std::function<void(std::string_view)>& on_text = nullptr);

  // The conversation so far (system message first, if any), as (role, content).
  const std::vector<std::pair<std::string, std::string>>& messages() const { return messages_; }
  const SessionOptions& options() const { return options_; }

 private:
  using OnText = std::function<void(std::string_view)>;
  using Stream = grpc::ClientReaderWriter<v1::ChatRequest, v1::ChatEvent>;

  Session(SessionOptions options, std::shared_ptr<grpc::Channel> channel);
  v1::ChatRequest Request() const;
  // The metadata (session header, API key) and wait_for_ready of a call.
  void SetUp(grpc::ClientContext& context) const;
  // One attempt of a turn, on a Chat call or on the session's stream: fills
  // `turn`, sets `started` once a delta arrived, returns the call's status.
  grpc::Status CallTurn(const v1::ChatRequest& request, const OnText& on_text, Turn& turn, bool& started);
  grpc::Status StreamTurn(const v1::ChatRequest& request, const OnText& on_text, Turn& turn, bool& started);
  // Finishes the stream (its reads ended, or it was cancelled) and drops it.
  grpc::Status CloseStream();

  SessionOptions options_;
  std::unique_ptr<v1::ChatService::Stub> stub_;
  std::vector<std::pair<std::string, std::string>> messages_;
  // With stream_turns: the open stream (null between a failed turn and the
  // next) and its call, and the thread that cancels a turn past its timeout
  // (started by the first turn). The stream goes before its context.
  std::unique_ptr<TurnWatchdog> watchdog_;
  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace strata::client

#endif  // STRATA_CLIENTS_CPP_STRATA_CLIENT_SESSION_H_
