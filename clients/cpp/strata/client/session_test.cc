#include "strata/client/session.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace strata::client {
namespace {

// A ChatService that answers "echo:<last user message>" in two deltas, records
// what it was sent, and refuses its first `refusals` calls with UNAVAILABLE
// (before any delta) or, with `fail_after_delta`, fails a call after its first
// delta. Its ChatSession answers each request of a stream as Chat does (a
// refusal only for a stream's first request), ends the stream with the first
// failing turn's status, and records how each stream ended.
class FakeChat final : public v1::ChatService::Service {
 public:
  grpc::Status Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                    grpc::ServerWriter<v1::ChatEvent>* writer) override {
    return Answer(*context, *request, /*may_refuse=*/true, writer);
  }

  grpc::Status ChatSession(grpc::ServerContext* context,
                           grpc::ServerReaderWriter<v1::ChatEvent, v1::ChatRequest>* stream) override {
    {
      absl::MutexLock lock(&mu_);
      ++stream_calls_;
    }
    grpc::Status status = grpc::Status::OK;
    v1::ChatRequest request;
    for (bool first = true; stream->Read(&request); first = false) {
      status = Answer(*context, request, /*may_refuse=*/first, stream);
      if (!status.ok()) break;
    }
    absl::MutexLock lock(&mu_);
    stream_ends_.push_back(status.error_code());
    return status;
  }

  void set_refusals(int n) {
    absl::MutexLock lock(&mu_);
    refusals_ = n;
  }
  void set_fail_after_delta(bool f) { fail_after_delta_ = f; }
  // The next request waits `stall` (or until its call is cancelled) before it is answered.
  void StallNextTurn(absl::Duration stall) {
    absl::MutexLock lock(&mu_);
    stall_ = stall;
  }
  std::vector<v1::ChatRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  std::vector<std::string> headers() {
    absl::MutexLock lock(&mu_);
    return headers_;
  }
  std::vector<std::string> authorizations() {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }
  int stream_calls() {
    absl::MutexLock lock(&mu_);
    return stream_calls_;
  }
  // The status each ended ChatSession stream returned, in the order they
  // ended, once `n` have ended or `wait` has passed.
  std::vector<grpc::StatusCode> stream_ends(size_t n = 0, absl::Duration wait = absl::ZeroDuration()) {
    const absl::Time end = absl::Now() + wait;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (stream_ends_.size() >= n || absl::Now() >= end) return stream_ends_;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

 private:
  static std::string Metadata(const grpc::ServerContext& context, const std::string& key) {
    auto it = context.client_metadata().find(key);
    return it == context.client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
  }

  grpc::Status Answer(const grpc::ServerContext& context, const v1::ChatRequest& request, bool may_refuse,
                      grpc::internal::WriterInterface<v1::ChatEvent>* writer) {
    absl::Duration stall;
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(request);
      headers_.push_back(Metadata(context, kSessionHeader));
      authorizations_.push_back(Metadata(context, "authorization"));
      if (may_refuse && refusals_ > 0) {
        --refusals_;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
      }
      stall = std::exchange(stall_, absl::ZeroDuration());
    }
    for (const absl::Time end = absl::Now() + stall; absl::Now() < end && !context.IsCancelled();) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (context.IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    const std::string answer = "echo:" + request.messages(request.messages_size() - 1).content();
    v1::ChatEvent event;
    event.mutable_delta()->set_text(answer.substr(0, 3));
    writer->Write(event);
    if (fail_after_delta_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "went away mid-answer");
    event.mutable_delta()->set_text(answer.substr(3));
    writer->Write(event);
    v1::ChatEvent done;
    done.mutable_done()->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(request.messages_size()));
    writer->Write(done);
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  int refusals_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration stall_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ChatRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> headers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
  int stream_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<grpc::StatusCode> stream_ends_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> fail_after_delta_ = false;
};

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }

  SessionOptions Options() {
    SessionOptions o;
    o.target = "127.0.0.1:" + std::to_string(port_);
    o.session_id = "s1";
    o.backoff = absl::Milliseconds(1);
    return o;
  }

  FakeChat fake_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

using Messages = std::vector<std::pair<std::string, std::string>>;

// A request's messages as (role, content).
Messages MessagesOf(const v1::ChatRequest& request) {
  Messages out;
  for (const v1::Message& m : request.messages()) out.emplace_back(m.role(), m.content());
  return out;
}

TEST_F(SessionTest, ResendsTheWholeConversationWithAnswersVerbatim) {
  SessionOptions o = Options();
  o.system = "be brief";
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok()) << session.status();
  std::string streamed;
  auto first = (*session)->Send("hi", [&](std::string_view text) { streamed += text; });
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->answer, "echo:hi");
  EXPECT_EQ(streamed, "echo:hi") << "on_text must see every delta, in order";
  EXPECT_EQ(first->done.usage().prompt_tokens(), 2u);
  ASSERT_TRUE((*session)->Send("again").ok());

  const std::vector<v1::ChatRequest> requests = fake_.requests();
  ASSERT_EQ(requests.size(), 2u);
  const v1::ChatRequest& second = requests[1];
  EXPECT_EQ(MessagesOf(second),
            (Messages{{"system", "be brief"}, {"user", "hi"}, {"assistant", "echo:hi"}, {"user", "again"}}));
  EXPECT_EQ(second.session_id(), "s1");
  EXPECT_EQ(second.max_new_tokens(), 256u);
  EXPECT_EQ(fake_.headers(), (std::vector<std::string>{"s1", "s1"})) << "x-session-id must go with every call";
}

TEST_F(SessionTest, RetriesUnavailableBeforeTheFirstToken) {
  fake_.set_refusals(2);
  auto session = Session::Create(Options());
  ASSERT_TRUE(session.ok());
  auto turn = (*session)->Send("hi");
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->attempts, 3);
  EXPECT_EQ(turn->answer, "echo:hi");
}

TEST_F(SessionTest, GivesUpAfterRetriesAndKeepsTheConversation) {
  fake_.set_refusals(10);
  SessionOptions o = Options();
  o.retries = 1;
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok());
  auto turn = (*session)->Send("hi");
  ASSERT_FALSE(turn.ok());
  EXPECT_EQ(turn.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(turn.status().message(), "draining");
  EXPECT_EQ(fake_.requests().size(), 2u);
  EXPECT_TRUE((*session)->messages().empty()) << "a failed turn must leave the conversation as it was";
}

TEST_F(SessionTest, NeverReplaysATurnWhoseTextStreamed) {
  fake_.set_fail_after_delta(true);
  auto session = Session::Create(Options());
  ASSERT_TRUE(session.ok());
  auto turn = (*session)->Send("hi");
  ASSERT_FALSE(turn.ok());
  EXPECT_EQ(turn.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake_.requests().size(), 1u);
  EXPECT_TRUE((*session)->messages().empty());
}

// With stream_turns the same turns go on one ChatSession stream.
class StreamTurnsTest : public SessionTest {
 protected:
  SessionOptions Options() {
    SessionOptions o = SessionTest::Options();
    o.stream_turns = true;
    return o;
  }
};

TEST_F(StreamTurnsTest, SendsTheTurnsOnOneStreamWithTheWholeConversation) {
  SessionOptions o = Options();
  o.system = "be brief";
  o.api_key = "k1";
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok()) << session.status();
  std::string streamed;
  auto first = (*session)->Send("hi", [&](std::string_view text) { streamed += text; });
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->answer, "echo:hi");
  EXPECT_EQ(streamed, "echo:hi") << "on_text must see every delta, in order";
  EXPECT_EQ(first->done.usage().prompt_tokens(), 2u);
  EXPECT_EQ(first->attempts, 1);
  ASSERT_TRUE((*session)->Send("again").ok());
  auto third = (*session)->Send("more");
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->answer, "echo:more");
  EXPECT_EQ(third->done.usage().prompt_tokens(), 6u);

  EXPECT_EQ(fake_.stream_calls(), 1) << "the turns must share one stream";
  const std::vector<v1::ChatRequest> requests = fake_.requests();
  ASSERT_EQ(requests.size(), 3u);
  const v1::ChatRequest& last = requests[2];
  EXPECT_EQ(MessagesOf(last), (Messages{{"system", "be brief"},
                                       {"user", "hi"},
                                       {"assistant", "echo:hi"},
                                       {"user", "again"},
                                       {"assistant", "echo:again"},
                                       {"user", "more"}}));
  EXPECT_EQ(last.session_id(), "s1");
  EXPECT_EQ(fake_.headers(), (std::vector<std::string>{"s1", "s1", "s1"})) << "x-session-id must go with the stream";
  EXPECT_EQ(fake_.authorizations(), (std::vector<std::string>{"Bearer k1", "Bearer k1", "Bearer k1"}));
  EXPECT_EQ((*session)->messages().size(), 7u);
}

TEST_F(StreamTurnsTest, RetriesUnavailableBeforeTheFirstTokenOnANewStream) {
  fake_.set_refusals(2);
  auto session = Session::Create(Options());
  ASSERT_TRUE(session.ok());
  auto turn = (*session)->Send("hi");
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->attempts, 3);
  EXPECT_EQ(turn->answer, "echo:hi");
  EXPECT_EQ(fake_.stream_calls(), 3) << "each refused stream ends; the retry opens a new one";
  ASSERT_TRUE((*session)->Send("again").ok());
  EXPECT_EQ(fake_.stream_calls(), 3) << "the stream that answered stays open";
}

TEST_F(StreamTurnsTest, GivesUpAfterRetriesAndKeepsTheConversation) {
  fake_.set_refusals(10);
  SessionOptions o = Options();
  o.retries = 1;
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok());
  auto turn = (*session)->Send("hi");
  ASSERT_FALSE(turn.ok());
  EXPECT_EQ(turn.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(turn.status().message(), "draining");
  EXPECT_EQ(fake_.stream_calls(), 2);
  EXPECT_TRUE((*session)->messages().empty());
}

TEST_F(StreamTurnsTest, NeverReplaysATurnWhoseTextStreamedAndReopensForTheNext) {
  auto session = Session::Create(Options());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Send("hi").ok());
  fake_.set_fail_after_delta(true);
  auto failed = (*session)->Send("again");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.status().message(), "went away mid-answer");
  EXPECT_EQ(fake_.requests().size(), 2u) << "a turn whose text streamed must not be sent again";
  EXPECT_EQ((*session)->messages().size(), 2u) << "a failed turn must leave the conversation as it was";

  fake_.set_fail_after_delta(false);
  auto next = (*session)->Send("more");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->answer, "echo:more");
  EXPECT_EQ(next->attempts, 1);
  EXPECT_EQ(fake_.stream_calls(), 2) << "the failed turn's stream ended; the next turn opens a new one";
  EXPECT_EQ(fake_.requests().back().messages_size(), 3) << "hi, echo:hi, more";
}

TEST_F(StreamTurnsTest, ATurnPastItsTimeoutCancelsTheStreamPromptly) {
  SessionOptions o = Options();
  o.timeout = absl::Milliseconds(200);
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Send("hi").ok());
  fake_.StallNextTurn(absl::Seconds(10));
  const absl::Time start = absl::Now();
  auto stalled = (*session)->Send("again");
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(stalled.ok());
  EXPECT_EQ(stalled.status().code(), absl::StatusCode::kDeadlineExceeded) << stalled.status();
  EXPECT_NE(stalled.status().message().find("timeout"), std::string_view::npos) << stalled.status();
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(2)) << "the turn must end at its timeout, not with the stall";
  EXPECT_EQ((*session)->messages().size(), 2u);

  auto next = (*session)->Send("more");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->answer, "echo:more");
  EXPECT_EQ(fake_.stream_calls(), 2);
  EXPECT_EQ(fake_.stream_ends(1, absl::Seconds(5)), (std::vector<grpc::StatusCode>{grpc::StatusCode::CANCELLED}))
      << "the timed-out turn's stream must be cancelled";
}

TEST_F(StreamTurnsTest, TheTimeoutBoundsEachTurnNotTheStream) {
  SessionOptions o = Options();
  o.timeout = absl::Seconds(1);
  auto session = Session::Create(o);
  ASSERT_TRUE(session.ok());
  for (const char* text : {"a", "b", "c"}) {
    auto turn = (*session)->Send(text);
    ASSERT_TRUE(turn.ok()) << turn.status();
    absl::SleepFor(absl::Milliseconds(700));
  }
  EXPECT_EQ(fake_.stream_calls(), 1) << "a stream open for 2 s, past the 1 s timeout, must carry all three turns";
}

TEST_F(StreamTurnsTest, DestroyingTheSessionEndsItsStreamWithOk) {
  auto session = Session::Create(Options());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Send("hi").ok());
  const absl::Time start = absl::Now();
  session->reset();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(fake_.stream_ends(), (std::vector<grpc::StatusCode>{grpc::StatusCode::OK}))
      << "the half-close must end the stream with OK";
}

TEST_F(StreamTurnsTest, DestroyingTheSessionAfterItsServerWentAwayDoesNotHang) {
  auto session = Session::Create(Options());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Send("hi").ok());
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(50)));  // cancels the open stream
  const absl::Time start = absl::Now();
  session->reset();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
}

TEST_F(StreamTurnsTest, AStreamBrokenBetweenTurnsIsReopenedForTheNextTurn) {
  auto session = Session::Create(Options());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Send("hi").ok());
  // The server restarts on the same port: its shutdown cancels the open stream.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(50)));
  server_->Wait();
  FakeChat restarted;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port_), grpc::InsecureServerCredentials());
  builder.RegisterService(&restarted);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  auto turn = (*session)->Send("again");
  ASSERT_TRUE(turn.ok()) << turn.status();
  EXPECT_EQ(turn->answer, "echo:again");
  EXPECT_EQ(turn->attempts, 2) << "the broken stream counts as a refused attempt";
  EXPECT_EQ(restarted.stream_calls(), 1);
  EXPECT_EQ(restarted.requests().size(), 1u);
  session->reset();
  server->Shutdown();
}

TEST(SessionOptionsTest, RefusesWhatTheServerWouldRefuse) {
  SessionOptions o;
  o.target = "127.0.0.1:1";
  EXPECT_EQ(Session::Create(o).status().code(), absl::StatusCode::kInvalidArgument) << "empty session_id";
  o.session_id = "s";
  o.system = "a";
  o.system_prompt_id = "b";
  EXPECT_EQ(Session::Create(o).status().code(), absl::StatusCode::kInvalidArgument) << "system and its id";
  o.system_prompt_id.clear();
  o.max_new_tokens = 0;
  EXPECT_EQ(Session::Create(o).status().code(), absl::StatusCode::kInvalidArgument) << "max_new_tokens 0";
  o.max_new_tokens = 1;
  EXPECT_TRUE(Session::Create(o).ok());
}

}  // namespace
}  // namespace strata::client
