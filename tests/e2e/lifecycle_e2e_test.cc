// Lifecycle of a real `strata serve`: health per service, a graceful drain on SIGTERM
// (NOT_SERVING, new turns UNAVAILABLE, the running turn finishes, exit 0) and a gRPC port
// that is this server's alone (a second server on it fails at once, saying so); calls past
// --max_rpc_threads are refused with RESOURCE_EXHAUSTED and the server recovers.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;

// grpc.health.v1.Health/Check through a generic stub (no generated health client in
// Debian's gRPC): 1 SERVING, 2 NOT_SERVING, 0 UNKNOWN; -code for an RPC error.
int HealthStatus(const std::string& target, const std::string& service) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);  // field 1 (service), length-delimited
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status status;
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &in, &out, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status.ok()) return -static_cast<int>(status.error_code());
  std::vector<grpc::Slice> slices;
  if (!out.Dump(&slices).ok()) return -100;
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes.size() >= 2 && bytes[0] == 0x08 ? bytes[1] : 0;  // field 1 (status), varint
}

v1::ChatRequest LongTurn(const std::string& session, int max_new) {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(static_cast<uint32_t>(max_new));
  v1::Message* m = r.add_messages();
  m->set_role("user");
  m->set_content("Tell me a long story, please.");
  return r;
}

TEST(LifecycleE2eTest, SigtermDrainsTheRunningTurnsThenExitsZero) {
  auto started = ServerProcess::Start({"--drain_seconds=120"});
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  EXPECT_EQ(HealthStatus(server.target(), ""), 1);
  EXPECT_EQ(HealthStatus(server.target(), "strata.v1.ChatService"), 1);
  EXPECT_EQ(HealthStatus(server.target(), "strata.v1.CacheService"), 1);

  // A turn long enough to be running when the signal comes; its first token says it is.
  constexpr int kTokens = 4000;  // seconds of work on a 2-core CPU, well past the checks below
  auto channel = grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  auto stub = v1::ChatService::NewStub(channel);
  grpc::ClientContext ctx;
  auto reader = stub->Chat(&ctx, LongTurn("long", kTokens));
  v1::ChatEvent event;
  int tokens = 0;
  ASSERT_TRUE(reader->Read(&event));
  if (event.has_delta()) tokens += event.delta().token_ids_size();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);

  // Draining: NOT_SERVING for every service, new turns refused.
  int health = 1;
  for (int i = 0; i < 100 && health == 1; ++i) {
    health = HealthStatus(server.target(), "strata.v1.ChatService");
    if (health == 1) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(health, 2) << "health did not go NOT_SERVING on SIGTERM";
  EXPECT_EQ(HealthStatus(server.target(), ""), 2);
  testing::ChatTurn refused = testing::RunChat(server.target(), LongTurn("new", 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();

  // The running turn ends as it would have, all its tokens streamed.
  v1::ChatDone done;
  while (reader->Read(&event)) {
    if (event.has_delta()) tokens += event.delta().token_ids_size();
    if (event.has_done()) done = event.done();
  }
  grpc::Status finished = reader->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_EQ(tokens, kTokens) << "the running turn was cut by the shutdown";
  EXPECT_EQ(done.usage().completion_tokens(), static_cast<uint32_t>(kTokens));
  const int status = server.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
}

// /metrics scraped without pause while the server stops: the scrape reads the engine's
// model (its KV transfer counters), so the metrics server must be gone before the engine
// is. (It was not: a scrape during the engine's teardown crashed the exit, 1 in a few.)
TEST(LifecycleE2eTest, ScrapesWhileTheServerStopsNeverCrashIt) {
  for (int round = 0; round < 4; ++round) {
    auto started = ServerProcess::Start({});
    ASSERT_TRUE(started.ok()) << started.status();
    ServerProcess& server = **started;
    std::atomic<bool> stop{false};
    std::atomic<int> scrapes{0};
    std::vector<std::thread> scrapers;
    for (int t = 0; t < 2; ++t) {
      scrapers.emplace_back([&] {
        while (!stop.load()) {
          if (metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics").ok()) ++scrapes;
        }
      });
    }
    for (int i = 0; i < 200 && scrapes.load() < 5; ++i) absl::SleepFor(absl::Milliseconds(10));
    const int status = server.Stop();
    stop = true;
    for (std::thread& t : scrapers) t.join();
    EXPECT_GT(scrapes.load(), 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << ": wait status " << status;
  }
}

TEST(LifecycleE2eTest, ASecondServerOnTheSamePortFailsAtOnceSayingSo) {
  auto first = ServerProcess::Start({});
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Time start = absl::Now();
  auto second = ServerProcess::Start({"--port=" + std::to_string((*first)->port())});
  EXPECT_FALSE(second.ok()) << "two servers share port " << (*first)->port();
  if (!second.ok()) {
    EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the port check should come before anything slow";
  // The first server is untouched.
  EXPECT_EQ(HealthStatus((*first)->target(), ""), 1);
  testing::ChatTurn turn = testing::RunChat((*first)->target(), LongTurn("still-here", 4));
  EXPECT_TRUE(turn.status.ok()) << turn.status.error_message();
}

// A sample from the server's /metrics; 0 when it is not there, -1 when there is no scrape.
double Sample(const ServerProcess& server, const std::string& key) {
  auto body = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics");
  if (!body.ok()) return -1;
  auto samples = metrics::ParsePrometheusText(*body);
  if (!samples.ok()) return -1;
  auto it = samples->find(key);
  return it == samples->end() ? 0 : it->second;
}

// strata_requests_total{code, method="strata.v1.ChatService/Chat"}.
double ChatCalls(const ServerProcess& server, const std::string& code) {
  return Sample(server, "strata_requests_total{code=\"" + code + "\",method=\"strata.v1.ChatService/Chat\"}");
}

// strata_finished_turns_total{reason}.
double FinishedTurns(const ServerProcess& server, const std::string& reason) {
  return Sample(server, "strata_finished_turns_total{reason=\"" + reason + "\"}");
}

// A call whose deadline passes mid-turn and one its client cancels are counted apart: by
// their calls' status codes, and by how their turns ended.
TEST(LifecycleE2eTest, DeadlinesAndCancellationsAreCountedApart) {
  auto started = ServerProcess::Start({});
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    auto reader = stub->Chat(&ctx, LongTurn("deadline", 4000));
    v1::ChatEvent event;
    while (reader->Read(&event)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    grpc::ClientContext ctx;
    auto reader = stub->Chat(&ctx, LongTurn("cancelled", 4000));
    v1::ChatEvent event;
    ASSERT_TRUE(reader->Read(&event));
    ctx.TryCancel();
    while (reader->Read(&event)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The server counts each when its handler ends (shortly after the client has gone).
  for (int i = 0; i < 100 && (ChatCalls(server, "deadline_exceeded") < 1 || ChatCalls(server, "cancelled") < 1); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(ChatCalls(server, "deadline_exceeded"), 1);
  EXPECT_EQ(ChatCalls(server, "cancelled"), 1);
  // The engine counted each turn's end before its call ended.
  EXPECT_EQ(FinishedTurns(server, "deadline"), 1);
  EXPECT_EQ(FinishedTurns(server, "cancelled"), 1);
  EXPECT_EQ(FinishedTurns(server, "stop") + FinishedTurns(server, "length") + FinishedTurns(server, "error"), 0);
}

// Calls that go away while their turn's last step runs (a one-token answer to a long
// prompt, cancelled or timed out within its prefill): every handler ends (none is left
// waiting for an event after the turn's last), and the server then stops at once on SIGTERM.
TEST(LifecycleE2eTest, CallsThatGoAwayInTheirTurnsLastStepAllEnd) {
  auto started = ServerProcess::Start({});
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  constexpr int kCalls = 16;
  for (int i = 0; i < kCalls; ++i) {
    v1::ChatRequest r = LongTurn("last-step-" + std::to_string(i), 1);
    r.mutable_messages(0)->set_content(std::string(400, static_cast<char>('a' + i % 26)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(5 + 6 * i));
    auto reader = stub->Chat(&ctx, r);
    v1::ChatEvent event;
    while (reader->Read(&event)) {
    }
    (void)reader->Finish();
  }
  auto ended = [&] {
    return ChatCalls(server, "ok") + ChatCalls(server, "cancelled") + ChatCalls(server, "deadline_exceeded");
  };
  for (int i = 0; i < 100 && ended() < kCalls; ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(ended(), kCalls) << "handlers of calls that went away never ended";
  const absl::Time stop = absl::Now();
  const int status = server.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(absl::Now() - stop, absl::Seconds(10)) << "SIGTERM waited for stuck handlers";
}

// Each open ChatSession stream holds one of the server's gRPC threads. Past
// --max_rpc_threads a new stream or call gets RESOURCE_EXHAUSTED at once, the streams
// already open keep working, health still answers, and once streams close calls succeed
// again.
TEST(LifecycleE2eTest, CallsPastTheThreadLimitGetResourceExhaustedAndTheServerRecovers) {
  auto server = ServerProcess::Start({"--max_rpc_threads=6"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials()));
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(60); };
  // A turn on the stream: true when it answered to its done event.
  auto turn = [](grpc::ClientReaderWriter<v1::ChatRequest, v1::ChatEvent>& stream, const std::string& session) {
    if (!stream.Write(LongTurn(session, 3))) return false;
    v1::ChatEvent e;
    while (stream.Read(&e)) {
      if (e.has_done()) return true;
    }
    return false;
  };
  constexpr int kStreams = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::ChatRequest, v1::ChatEvent>>> open;
  int refused = 0;
  for (int i = 0; i < kStreams; ++i) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(deadline());
    auto stream = stub->ChatSession(ctx.get());
    if (turn(*stream, "s" + std::to_string(i))) {
      contexts.push_back(std::move(ctx));
      open.push_back(std::move(stream));
      continue;
    }
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << "stream " << i << ": "
                                                                          << status.error_message();
    ++refused;
  }
  EXPECT_GE(open.size(), 1u);
  EXPECT_LT(open.size(), 6u) << "more streams than threads";
  EXPECT_EQ(static_cast<int>(open.size()) + refused, kStreams);
  // While they are open: a Chat call is refused, health answers, the open streams still talk.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    auto reader = stub->Chat(&ctx, LongTurn("unary", 3));
    v1::ChatEvent e;
    while (reader->Read(&e)) {}
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  EXPECT_EQ(HealthStatus((*server)->target(), ""), 1) << "health should answer SERVING past the limit";
  for (size_t i = 0; i < open.size(); ++i) EXPECT_TRUE(turn(*open[i], "s" + std::to_string(i))) << "stream " << i;
  for (auto& stream : open) {
    ASSERT_TRUE(stream->WritesDone());
    v1::ChatEvent e;
    EXPECT_FALSE(stream->Read(&e));
    EXPECT_TRUE(stream->Finish().ok());
  }
  // The threads go back to the pool as their calls end: a Chat call succeeds again.
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  for (const absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    auto reader = stub->Chat(&ctx, LongTurn("after", 3));
    v1::ChatEvent e;
    while (reader->Read(&e)) {}
    code = reader->Finish().error_code();
    if (code != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(code, grpc::StatusCode::OK);
}

}  // namespace
}  // namespace strata
