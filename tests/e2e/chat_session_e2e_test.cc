// End-to-end: ChatSession, a session's turns over one long-lived call, against a real
// `strata serve` (CPU, built-in model) and the C++ stub: its turns answer as Chat calls
// do, reuse the cache as they do, and a failing or malformed turn ends the stream with
// a clear status and changes nothing.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <sys/wait.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/cache_on_off_servers.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;
using Conversation = std::vector<std::pair<std::string, std::string>>;

struct TurnOutput {
  std::vector<int32_t> tokens;
  std::string text;
  bool done = false;
  v1::ChatDone final_event;
};

v1::ChatRequest Request(const std::string& session, const Conversation& conv, int max_new = 12) {
  return testing::MessagesRequest(session, conv, max_new);
}

// Reads one turn's events from `read` (a Chat reader's or a ChatSession stream's Read)
// up to its `done`, or to the end of the stream.
template <typename Read>
TurnOutput ReadTurn(Read&& read) {
  TurnOutput out;
  v1::ChatEvent e;
  while (!out.done && read(&e)) {
    if (e.has_delta()) {
      out.tokens.insert(out.tokens.end(), e.delta().token_ids().begin(), e.delta().token_ids().end());
      out.text += e.delta().text();
    }
    if (e.has_done()) {
      out.done = true;
      out.final_event = e.done();
    }
  }
  return out;
}

std::chrono::system_clock::time_point InAMinute() { return std::chrono::system_clock::now() + std::chrono::minutes(1); }

TurnOutput ChatCall(v1::ChatService::Stub& stub, const v1::ChatRequest& request, grpc::Status* status) {
  grpc::ClientContext ctx;
  ctx.set_deadline(InAMinute());
  auto reader = stub.Chat(&ctx, request);
  TurnOutput out = ReadTurn([&](v1::ChatEvent* e) { return reader->Read(e); });
  v1::ChatEvent rest;
  while (reader->Read(&rest)) {}
  *status = reader->Finish();
  return out;
}

const std::vector<std::string> kUserTurns = {
    "Hello! Please help me plan a trip to the mountains next month.",
    "What should I pack for three days of hiking?",
    "Great, now summarise that in one line.",
};

class ChatSessionE2eTest : public testing::CacheOnOffServers<ChatSessionE2eTest> {
 protected:
  static std::unique_ptr<v1::ChatService::Stub> Stub(ServerProcess* server) {
    return v1::ChatService::NewStub(grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials()));
  }
};

TEST_F(ChatSessionE2eTest, TurnsOnOneStreamAnswerAsChatCallsAndReuseTheCache) {
  auto on = Stub(cache_on_), off = Stub(cache_off_);
  grpc::ClientContext ctx;
  ctx.set_deadline(InAMinute());
  auto stream = on->ChatSession(&ctx);
  Conversation conv;
  std::vector<TurnOutput> streamed;
  for (const std::string& user : kUserTurns) {
    conv.push_back({"user", user});
    ASSERT_TRUE(stream->Write(Request("streamed", conv)));
    streamed.push_back(ReadTurn([&](v1::ChatEvent* e) { return stream->Read(e); }));
    ASSERT_TRUE(streamed.back().done) << "turn " << streamed.size() << " ended without its done event";
    // The same conversation, as one Chat call on the cache-off server: the same answer.
    grpc::Status status;
    const TurnOutput fresh = ChatCall(*off, Request("streamed", conv), &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(streamed.back().tokens, fresh.tokens) << "turn " << streamed.size();
    conv.push_back({"assistant", streamed.back().text});
  }
  ASSERT_TRUE(stream->WritesDone());
  v1::ChatEvent extra;
  EXPECT_FALSE(stream->Read(&extra)) << "an event after the half-close";
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(streamed[0].final_event.usage().cached_tokens(), 0u);
  for (size_t t = 1; t < streamed.size(); ++t) {
    const v1::Usage& prev = streamed[t - 1].final_event.usage();
    // The previous turn's prompt and every answer token it fed (all but the last).
    EXPECT_EQ(streamed[t].final_event.usage().cached_tokens(), prev.prompt_tokens() + prev.completion_tokens() - 1)
        << "turn " << t + 1;
    EXPECT_EQ(streamed[t].final_event.cache_tier(), v1::TIER_HBM) << "turn " << t + 1;
  }
}

TEST_F(ChatSessionE2eTest, AFailingTurnEndsTheStreamWithItsStatusAndChangesNothing) {
  auto on = Stub(cache_on_);
  auto cache = v1::CacheService::NewStub(grpc::CreateChannel(cache_on_->target(), grpc::InsecureChannelCredentials()));
  auto session_tokens = [&]() -> int64_t {
    grpc::ClientContext ctx;
    v1::GetSessionRequest req;
    req.set_session_id("failing");
    v1::SessionInfo info;
    return cache->GetSession(&ctx, req, &info).ok() ? static_cast<int64_t>(info.cached_tokens()) : -1;
  };
  grpc::ClientContext ctx;
  ctx.set_deadline(InAMinute());
  auto stream = on->ChatSession(&ctx);
  const Conversation conv = {{"user", kUserTurns[0]}};
  ASSERT_TRUE(stream->Write(Request("failing", conv)));
  const TurnOutput first = ReadTurn([&](v1::ChatEvent* e) { return stream->Read(e); });
  ASSERT_TRUE(first.done);
  // The session's KV is stored once its write-back lands.
  int64_t stored = -1;
  for (absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(20))) {
    if ((stored = session_tokens()) > 0) break;
  }
  ASSERT_GT(stored, 0);
  // A turn with neither messages nor tokens, then a well-formed one: the first ends the
  // stream, the second is never answered.
  v1::ChatRequest bad;
  bad.set_session_id("failing");
  bad.set_max_new_tokens(4);
  ASSERT_TRUE(stream->Write(bad));
  stream->Write(Request("failing", {{"user", "never answered"}}));
  const TurnOutput after = ReadTurn([&](v1::ChatEvent* e) { return stream->Read(e); });
  EXPECT_FALSE(after.done);
  EXPECT_TRUE(after.tokens.empty());
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(session_tokens(), stored) << "the failed turn changed the stored session";
}

TEST_F(ChatSessionE2eTest, AMessageThatDoesNotParseEndsTheStreamWithInvalidArgument) {
  auto channel = grpc::CreateChannel(cache_on_->target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(InAMinute());
  grpc::CompletionQueue cq;
  void* tag;
  bool ok;
  auto call = generic.PrepareCall(&ctx, "/strata.v1.ChatService/ChatSession", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Slice slice(std::string("\xff\xff\xff\xff", 4));  // a field key with no end
  grpc::ByteBuffer garbage(&slice, 1);
  call->Write(garbage, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_FALSE(ok) << "an event came back for a malformed turn";
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {}
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("ChatRequest"), std::string::npos) << status.error_message();
}

TEST_F(ChatSessionE2eTest, AClientThatGoesAwayMidTurnFreesItsSession) {
  auto on = Stub(cache_on_);
  {
    grpc::ClientContext ctx;
    auto stream = on->ChatSession(&ctx);
    ASSERT_TRUE(stream->Write(Request("walk-away", {{"user", "talk for a long time"}}, 4000)));
    v1::ChatEvent e;
    ASSERT_TRUE(stream->Read(&e));  // the turn is running
    ctx.TryCancel();
    while (stream->Read(&e)) {}
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The session's next turn is admitted (nothing stuck) and answers.
  grpc::Status status;
  const TurnOutput next = ChatCall(*on, Request("walk-away", {{"user", "short one"}}, 4), &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(next.done);
}

TEST_F(ChatSessionE2eTest, StreamsAreCountedByTheirStatus) {
  auto on = Stub(cache_on_);
  auto count = [&](const std::string& code) {
    auto body = metrics::HttpGet("127.0.0.1", cache_on_->metrics_port(), "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    if (!body.ok()) return -1.0;
    auto samples = metrics::ParsePrometheusText(*body);
    EXPECT_TRUE(samples.ok()) << samples.status();
    if (!samples.ok()) return -1.0;
    auto it = samples->find("strata_requests_total{code=\"" + code + "\",method=\"strata.v1.ChatService/ChatSession\"}");
    return it == samples->end() ? 0.0 : it->second;
  };
  const double ok_before = count("ok"), bad_before = count("invalid_argument");
  {  // A stream with no turns: the client's half-close ends it with OK.
    grpc::ClientContext ctx;
    auto stream = on->ChatSession(&ctx);
    ASSERT_TRUE(stream->WritesDone());
    EXPECT_TRUE(stream->Finish().ok());
  }
  {  // A session ID that is too long.
    grpc::ClientContext ctx;
    auto stream = on->ChatSession(&ctx);
    ASSERT_TRUE(stream->Write(Request(std::string(200, 'x'), {{"user", "hi"}})));
    v1::ChatEvent e;
    while (stream->Read(&e)) {}
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(count("ok"), ok_before + 1);
  EXPECT_EQ(count("invalid_argument"), bad_before + 1);
}

// On shutdown a stream between turns ends with UNAVAILABLE (the code a gateway retries,
// on another replica) once the running turns are done, and the server exits cleanly.
TEST(ChatSessionShutdownE2eTest, AStreamBetweenTurnsEndsUnavailableOnShutdown) {
  auto server = ServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(InAMinute());
  auto stream = stub->ChatSession(&ctx);
  ASSERT_TRUE(stream->Write(Request("idle", {{"user", "hello"}}, 4)));
  ASSERT_TRUE(ReadTurn([&](v1::ChatEvent* e) { return stream->Read(e); }).done);
  const absl::Time stop = absl::Now();
  const int wait_status = (*server)->Stop();
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) << "wait status " << wait_status;
  v1::ChatEvent e;
  EXPECT_FALSE(stream->Read(&e));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(absl::Now() - stop, absl::Seconds(10)) << "the idle stream held the shutdown up";
}

}  // namespace
}  // namespace strata
