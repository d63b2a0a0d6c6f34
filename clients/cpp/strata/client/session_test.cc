#include "strata/client/session.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace strata::client {
namespace {

// A ChatService that answers "echo:<last user message>" in two deltas, records
// what it was sent, and refuses its first `refusals` calls with UNAVAILABLE
// (before any delta) or, with `fail_after_delta`, fails a call after its first
// delta.
class FakeChat final : public v1::ChatService::Service {
 public:
  grpc::Status Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                    grpc::ServerWriter<v1::ChatEvent>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(*request);
      auto header = context->client_metadata().find(kSessionHeader);
      headers_.push_back(
          header == context->client_metadata().end() ? "" : std::string(header->second.data(), header->second.size()));
      if (refusals_ > 0) {
        --refusals_;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
      }
    }
    const std::string answer = "echo:" + request->messages(request->messages_size() - 1).content();
    v1::ChatEvent event;
    event.mutable_delta()->set_text(answer.substr(0, 3));
    writer->Write(event);
    if (fail_after_delta_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "went away mid-answer");
    event.mutable_delta()->set_text(answer.substr(3));
    writer->Write(event);
    v1::ChatEvent done;
    done.mutable_done()->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(request->messages_size()));
    writer->Write(done);
    return grpc::Status::OK;
  }

  void set_refusals(int n) {
    absl::MutexLock lock(&mu_);
    refusals_ = n;
  }
  void set_fail_after_delta(bool f) { fail_after_delta_ = f; }
  std::vector<v1::ChatRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  std::vector<std::string> headers() {
    absl::MutexLock lock(&mu_);
    return headers_;
  }

 private:
  absl::Mutex mu_;
  int refusals_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::ChatRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> headers_ ABSL_GUARDED_BY(mu_);
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
  ASSERT_EQ(second.messages_size(), 4);
  EXPECT_EQ(second.messages(0).role(), "system");
  EXPECT_EQ(second.messages(1).content(), "hi");
  EXPECT_EQ(second.messages(2).role(), "assistant");
  EXPECT_EQ(second.messages(2).content(), "echo:hi");
  EXPECT_EQ(second.messages(3).content(), "again");
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
