// Two strata replicas behind nginx (Debian's package) with deploy/nginx/strata.conf: a
// session's turns keep landing on one replica (reuse holds turn after turn), a stopped
// replica's sessions move to the other as misses that recompute (answers stay the
// cache-off answers), and the restarted replica serves its persisted sessions from SSD.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;
using Turn = testing::ChatTurn;

constexpr char kNginx[] = "/usr/sbin/nginx";

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// nginx with the repository's config, its replica and listen ports replaced.
class Nginx {
 public:
  static std::unique_ptr<Nginx> Start(const std::string& dir, int listen, const std::vector<int>& replicas) {
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/deploy/nginx/strata.conf");
    std::stringstream text;
    text << in.rdbuf();
    std::string conf = text.str();
    conf = std::regex_replace(conf, std::regex("listen 127\\.0\\.0\\.1:\\d+"), absl::StrCat("listen 127.0.0.1:", listen));
    std::string servers;
    for (int p : replicas) absl::StrAppend(&servers, "server 127.0.0.1:", p, " max_fails=1 fail_timeout=5s;\n        ");
    conf = std::regex_replace(conf, std::regex("(server 127\\.0\\.0\\.1:\\d+[^;]*;\\s*)+"), servers);
    std::filesystem::create_directories(dir + "/logs");
    std::filesystem::permissions(dir, std::filesystem::perms::all);
    std::ofstream(dir + "/nginx.conf") << conf;
    auto n = std::unique_ptr<Nginx>(new Nginx);
    n->pid_ = fork();
    if (n->pid_ == 0) {
      const std::string globals = "daemon off; pid " + dir + "/nginx.pid; error_log " + dir + "/logs/error.log;";
      execl(kNginx, kNginx, "-p", dir.c_str(), "-c", (dir + "/nginx.conf").c_str(), "-g", globals.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 100 && !Accepts(listen); ++i) absl::SleepFor(absl::Milliseconds(100));
    return Accepts(listen) ? std::move(n) : nullptr;
  }
  ~Nginx() {
    kill(pid_, SIGQUIT);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

 private:
  Nginx() = default;
  pid_t pid_ = -1;
};

std::set<std::string> SessionsOn(const std::string& target) {
  auto stub = v1::CacheService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::ListSessionsResponse resp;
  EXPECT_TRUE(stub->ListSessions(&ctx, v1::ListSessionsRequest(), &resp).ok());
  std::set<std::string> out;
  for (const v1::SessionInfo& s : resp.sessions()) out.insert(s.session_id());
  return out;
}

class NginxRoutingE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kNginx, X_OK) != 0) GTEST_SKIP() << "nginx is not installed (Debian: apt-get install nginx)";
  }
  std::unique_ptr<ServerProcess> Replica(int i) {
    const std::string ssd = absl::StrCat(dir_, "/ssd", i);
    std::filesystem::create_directories(ssd);
    auto s = ServerProcess::Start({"--device=cpu", absl::StrCat("--port=", ports_[i]), "--ssd_dirs=" + ssd,
                                   "--ssd_capacity_bytes=134217728"});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  storage::testing::TempDir tmp_{"strata-nginx-e2e"};
  std::string dir_ = tmp_.path();
  std::vector<int> ports_ = {FreePort(), FreePort()};
};

TEST_F(NginxRoutingE2eTest, SessionsStayOnTheirReplicaAndMoveWhenItStops) {
  std::vector<std::unique_ptr<ServerProcess>> replicas;
  replicas.push_back(Replica(0));
  replicas.push_back(Replica(1));
  ASSERT_TRUE(replicas[0] && replicas[1]);
  auto off = ServerProcess::Start({"--cache=off", "--device=cpu"});
  ASSERT_TRUE(off.ok());
  const int listen = FreePort();
  auto nginx = Nginx::Start(dir_ + "/nginx", listen, ports_);
  ASSERT_TRUE(nginx != nullptr) << "nginx did not start; see " << dir_ << "/nginx/logs/error.log";
  const std::string front = absl::StrCat("127.0.0.1:", listen);

  constexpr int kSessions = 16;
  std::map<int, v1::ChatRequest> conversations;
  auto next_turn = [&](int s, const std::string& text) {
    v1::ChatRequest& r = conversations[s];
    r.set_session_id(absl::StrCat("user-", s));
    r.set_max_new_tokens(6);
    r.set_persist(true);
    v1::Message* m = r.add_messages();
    m->set_role("user");
    m->set_content(text);
    return r;
  };
  auto answered = [&](int s, const Turn& t) {
    v1::Message* m = conversations[s].add_messages();
    m->set_role("assistant");
    m->set_content(t.text);
  };
  // Three turns each through nginx: every returning turn reuses its history, so each
  // session's turns reached the replica that holds it.
  for (int turn = 0; turn < 3; ++turn) {
    for (int s = 0; s < kSessions; ++s) {
      const v1::ChatRequest r = next_turn(s, absl::StrCat("Message ", turn, " of session ", s));
      const Turn t = testing::RunChat(front, r);
      ASSERT_TRUE(t.status.ok()) << t.status.error_message();
      if (turn > 0) EXPECT_GT(t.done.usage().cached_tokens(), 0u) << "session " << s << " turn " << turn;
      EXPECT_EQ(t.tokens, testing::RunChat((*off)->target(), r).tokens);
      answered(s, t);
    }
  }
  const std::set<std::string> on_a = SessionsOn(replicas[0]->target()), on_b = SessionsOn(replicas[1]->target());
  EXPECT_EQ(on_a.size() + on_b.size(), static_cast<size_t>(kSessions)) << "a session is held by both replicas";
  EXPECT_GT(on_a.size(), 0u);
  EXPECT_GT(on_b.size(), 0u) << "consistent hashing put every session on one replica";

  // Replica A stops: its sessions' next turns go to B as misses, answered correctly.
  ASSERT_EQ(replicas[0]->Stop(), 0);
  for (int s = 0; s < kSessions; ++s) {
    const v1::ChatRequest r = next_turn(s, "While A is down");
    const Turn t = testing::RunChat(front, r);
    ASSERT_TRUE(t.status.ok()) << t.status.error_message();
    EXPECT_EQ(t.tokens, testing::RunChat((*off)->target(), r).tokens) << "session " << s;
    if (on_a.contains(r.session_id())) EXPECT_EQ(t.done.usage().cached_tokens(), 0u) << "a miss on B";
    answered(s, t);
  }
  // A comes back on its port with its SSD tier: its sessions return to it and reuse the
  // history it persisted before it stopped.
  replicas[0] = Replica(0);
  ASSERT_TRUE(replicas[0] != nullptr);
  absl::SleepFor(absl::Seconds(6));  // past nginx's fail_timeout for A
  int from_ssd = 0;
  for (int s = 0; s < kSessions; ++s) {
    const v1::ChatRequest r = next_turn(s, "A is back");
    const Turn t = testing::RunChat(front, r);
    ASSERT_TRUE(t.status.ok()) << t.status.error_message();
    EXPECT_EQ(t.tokens, testing::RunChat((*off)->target(), r).tokens) << "session " << s;
    if (on_a.contains(r.session_id())) {
      EXPECT_GT(t.done.usage().cached_tokens(), 0u) << r.session_id() << " lost its persisted history";
      from_ssd += t.done.cache_tier() == v1::TIER_SSD;
    }
    answered(s, t);
  }
  EXPECT_EQ(from_ssd, static_cast<int>(on_a.size())) << "A's sessions came back from its SSD tier";
}

// ChatSession streams pass through the proxy, routed by the same session header as Chat
// calls: a session's turns on a stream and its next turn as a call reach one replica.
TEST_F(NginxRoutingE2eTest, ChatSessionStreamsReachTheSessionsReplica) {
  std::vector<std::unique_ptr<ServerProcess>> replicas;
  replicas.push_back(Replica(0));
  replicas.push_back(Replica(1));
  ASSERT_TRUE(replicas[0] && replicas[1]);
  const int listen = FreePort();
  auto nginx = Nginx::Start(dir_ + "/nginx", listen, ports_);
  ASSERT_TRUE(nginx != nullptr) << "nginx did not start; see " << dir_ << "/nginx/logs/error.log";
  const std::string front = absl::StrCat("127.0.0.1:", listen);
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel(front, grpc::InsecureChannelCredentials()));
  for (int s = 0; s < 6; ++s) {
    const std::string id = absl::StrCat("streamed-", s);
    v1::ChatRequest r;
    r.set_session_id(id);
    r.set_max_new_tokens(4);
    for (int t = 0; t < 4; ++t) r.add_token_ids(65 + s + t);
    std::vector<int32_t> answer;
    {
      grpc::ClientContext ctx;
      ctx.AddMetadata("x-session-id", id);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(1));
      auto stream = stub->ChatSession(&ctx);
      for (int turn = 0; turn < 2; ++turn) {
        ASSERT_TRUE(stream->Write(r)) << id;
        v1::ChatEvent e;
        bool done = false;
        while (!done && stream->Read(&e)) {
          if (e.has_delta()) answer.insert(answer.end(), e.delta().token_ids().begin(), e.delta().token_ids().end());
          if (e.has_done()) {
            done = true;
            if (turn > 0) EXPECT_GT(e.done().usage().cached_tokens(), 0u) << id;
          }
        }
        ASSERT_TRUE(done) << id << " turn " << turn << " ended without its done event";
        for (int32_t token : answer) r.add_token_ids(token);
        answer.clear();
        r.add_token_ids(66);
      }
      ASSERT_TRUE(stream->WritesDone());
      const grpc::Status status = stream->Finish();
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    const Turn next = testing::RunChat(front, r);
    ASSERT_TRUE(next.status.ok()) << next.status.error_message();
    EXPECT_GT(next.done.usage().cached_tokens(), 0u) << id << ": the call reached another replica than the stream";
  }
}

// A request whose session header names another session is refused.
TEST_F(NginxRoutingE2eTest, ASessionHeaderThatDisagreesIsRefused) {
  auto replica = Replica(0);
  ASSERT_TRUE(replica != nullptr);
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel(replica->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-session-id", "someone-else");
  v1::ChatRequest r;
  r.set_session_id("me");
  r.set_max_new_tokens(2);
  r.add_token_ids(65);
  auto reader = stub->Chat(&ctx, r);
  v1::ChatEvent e;
  while (reader->Read(&e)) {
  }
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("x-session-id"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace strata
