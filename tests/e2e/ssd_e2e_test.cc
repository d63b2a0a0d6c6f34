// End-to-end with the SSD tier: a real `strata serve` whose host tier is smaller than the
// working set, so sessions are demoted to SSD, promoted back, and recovered after a
// restart; answers always equal the cache-off answers.
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/time/clock.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "storage/testing/small_file_system.h"
#include "storage/testing/temp_dir.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;

using Turn = testing::ChatTurn;

Turn Chat(const std::string& target, const std::string& session,
          const std::vector<std::pair<std::string, std::string>>& messages, bool persist) {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(12);
  r.set_persist(persist);
  for (const auto& [role, content] : messages) {
    v1::Message* m = r.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return testing::RunChat(target, r);
}

absl::StatusOr<v1::SessionInfo> GetSession(const std::string& target, const std::string& session) {
  return testing::GetSessionInfo(target, session);
}

class SsdE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto off = ServerProcess::Start({"--cache=off", "--device=cpu"});
    ASSERT_TRUE(off.ok()) << off.status();
    cache_off_ = *std::move(off);
  }
  std::unique_ptr<ServerProcess> StartTiered() {
    // Room for 3 chunks of the built-in model on the host: less than the working set.
    // Tier sizes are counted in the CPU backend's chunks (fp32 rows): the tests pin it.
    auto s = ServerProcess::Start({"--device=cpu", "--hbm_cache_bytes=0", "--host_cache_bytes=" + std::to_string(3 * 1052672),
                                   "--ssd_dirs=" + dir_ + "/ssd", "--ssd_capacity_bytes=67108864",
                                   "--index_dir=" + dir_ + "/index"});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  storage::testing::TempDir tmp_{"strata-ssd-e2e"};
  std::string dir_ = tmp_.path();
  std::unique_ptr<ServerProcess> cache_off_;
};

TEST_F(SsdE2eTest, DemotedSessionIsServedFromSsdAndAfterRestart) {
  std::filesystem::create_directories(dir_ + "/ssd");
  auto server = StartTiered();
  ASSERT_NE(server, nullptr);
  std::vector<std::pair<std::string, std::string>> conv = {{"user", "Remember: my favourite colour is teal."}};
  Turn first = Chat(server->target(), "keeper", conv, /*persist=*/true);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_TRUE(first.done.persisted());
  // Other sessions fill the host tier: the keeper's host copy is dropped (it is on SSD).
  for (int i = 0; i < 4; ++i) {
    Turn other = Chat(server->target(), "filler-" + std::to_string(i), {{"user", "filler " + std::to_string(i)}}, true);
    ASSERT_TRUE(other.status.ok()) << other.status.error_message();
  }
  auto info = GetSession(server->target(), "keeper");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tier(), v1::TIER_SSD);
  EXPECT_TRUE(info->persisted());

  conv.push_back({"assistant", first.text});
  conv.push_back({"user", "What is my favourite colour?"});
  Turn second = Chat(server->target(), "keeper", conv, true);
  Turn reference = Chat(cache_off_->target(), "keeper", conv, false);
  ASSERT_TRUE(second.status.ok() && reference.status.ok());
  EXPECT_EQ(second.done.cache_tier(), v1::TIER_SSD);
  EXPECT_EQ(second.done.usage().cached_tokens(),
            first.done.usage().prompt_tokens() + first.done.usage().completion_tokens() - 1);
  EXPECT_EQ(second.tokens, reference.tokens) << "the SSD-served answer differs from the cache-off one";

  auto body = metrics::HttpGet("127.0.0.1", server->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok());
  auto samples = metrics::ParsePrometheusText(*body);
  ASSERT_TRUE(samples.ok());
  EXPECT_GE((*samples)["strata_cache_hits_total{tier=\"ssd\"}"], 1);
  EXPECT_GE((*samples)["strata_cache_demotions_total"], 1);
  EXPECT_GT((*samples)["strata_bytes_moved_total{direction=\"host_to_ssd\"}"], 0);
  EXPECT_GT((*samples)["strata_bytes_moved_total{direction=\"ssd_to_host\"}"], 0);
  EXPECT_EQ((*samples)["strata_ssd_degraded"], 0);

  // Restart: every persisted session is served again, from SSD.
  int status = server->Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  server = StartTiered();
  ASSERT_NE(server, nullptr);
  info = GetSession(server->target(), "keeper");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->persisted());
  conv.push_back({"assistant", second.text});
  conv.push_back({"user", "And after a restart?"});
  Turn third = Chat(server->target(), "keeper", conv, false);
  Turn reference3 = Chat(cache_off_->target(), "keeper", conv, false);
  ASSERT_TRUE(third.status.ok());
  EXPECT_EQ(third.done.cache_tier(), v1::TIER_SSD);
  EXPECT_EQ(third.done.usage().cached_tokens(),
            second.done.usage().prompt_tokens() + second.done.usage().completion_tokens() - 1);
  EXPECT_EQ(third.tokens, reference3.tokens);

  // A gateway's Prefetch brings a recovered (SSD-only) session up to host memory in the
  // background; its next turn is then a host hit.
  info = GetSession(server->target(), "filler-0");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->tier(), v1::TIER_SSD);
  {
    auto stub = v1::CacheService::NewStub(grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::PrefetchRequest req;
    req.add_session_ids("filler-0");
    req.add_session_ids("nobody");
    v1::PrefetchResponse resp;
    ASSERT_TRUE(stub->Prefetch(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.accepted(), 1u);
  }
  for (int i = 0; i < 100 && info.ok() && info->tier() != v1::TIER_HOST; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    info = GetSession(server->target(), "filler-0");
  }
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tier(), v1::TIER_HOST) << "the prefetched session did not reach host memory";
  Turn filler = Chat(server->target(), "filler-0", {{"user", "filler 0"}, {"assistant", "x"}, {"user", "again"}}, false);
  ASSERT_TRUE(filler.status.ok());
  EXPECT_EQ(filler.done.cache_tier(), v1::TIER_HOST);
}

TEST_F(SsdE2eTest, FullDiskDegradesToHostOnlyAndEveryAnswerStaysCorrect) {
  storage::testing::SmallFileSystem fs;
  if (std::string why = fs.Mount(dir_, 8); !why.empty()) GTEST_SKIP() << "disk-full test skipped: " << why;
  std::unique_ptr<ServerProcess> server;
  {
    // 64 MiB of SSD tier asked for on a file system of 8: it fills up after a few chunks.
    // Tier sizes are counted in the CPU backend's chunks (fp32 rows): the tests pin it.
    auto s = ServerProcess::Start({"--device=cpu", "--hbm_cache_bytes=0", "--host_cache_bytes=" + std::to_string(3 * 1052672),
                                   "--ssd_dirs=" + fs.path() + "/ssd", "--ssd_capacity_bytes=67108864",
                                   "--index_dir=" + dir_ + "/index"});
    ASSERT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
  }
  constexpr int kSessions = 10;
  std::vector<std::vector<std::pair<std::string, std::string>>> convs(kSessions);
  for (int i = 0; i < kSessions; ++i) {
    for (int turn = 0; turn < 2; ++turn) {
      convs[i].push_back({"user", "Session " + std::to_string(i) + " turn " + std::to_string(turn) +
                                      ": tell me something about the number " + std::to_string(i * 7 + turn)});
      Turn got = Chat(server->target(), "full-" + std::to_string(i), convs[i], /*persist=*/false);
      Turn want = Chat(cache_off_->target(), "full-" + std::to_string(i), convs[i], false);
      ASSERT_TRUE(got.status.ok()) << got.status.error_message();
      ASSERT_TRUE(want.status.ok());
      EXPECT_EQ(got.tokens, want.tokens) << "session " << i << " turn " << turn;
      convs[i].push_back({"assistant", got.text});
    }
  }
  auto body = metrics::HttpGet("127.0.0.1", server->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok());
  auto samples = metrics::ParsePrometheusText(*body);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ((*samples)["strata_ssd_degraded"], 1) << "the full disk was not noticed";
  EXPECT_GE((*samples)["strata_ssd_write_errors_total"], 1);
  EXPECT_GT((*samples)["strata_cache_hits_total{tier=\"host\"}"], 0) << "host caching goes on";
  // A chat that asks for persistence is told it did not happen, and still answered.
  Turn asked = Chat(server->target(), "full-0", convs[0], /*persist=*/true);
  ASSERT_TRUE(asked.status.ok()) << asked.status.error_message();
  EXPECT_FALSE(asked.done.persisted());
  int status = server->Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}


double Metric(const ServerProcess& server, const std::string& key) {
  auto body = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics");
  if (!body.ok()) return -1;
  auto samples = metrics::ParsePrometheusText(*body);
  return samples.ok() && samples->contains(key) ? samples->at(key) : -1;
}

// Writes zeros into `path` until the file system is full.
void FillUp(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  std::vector<char> zeros(1 << 16);
  while (std::fwrite(zeros.data(), 1, zeros.size(), f) == zeros.size()) {
  }
  std::fclose(f);
  sync();
}

// The index on a full file system (its default place, beside the SSD tier's file): the
// server starts (RocksDB would abort opening it for writing), serves with host-only
// caching and says so, still serves what was persisted, and persists again by itself
// once there is room.
TEST_F(SsdE2eTest, FullDiskUnderTheIndexStartsHostOnlyAndRecoversWhenSpaceReturns) {
  storage::testing::SmallFileSystem fs;
  if (std::string why = fs.Mount(dir_, 64); !why.empty()) GTEST_SKIP() << "disk-full test skipped: " << why;
  const std::vector<std::string> flags = {"--device=cpu", "--hbm_cache_bytes=0",
                                          "--host_cache_bytes=" + std::to_string(3 * 1052672),
                                          "--ssd_dirs=" + fs.path() + "/ssd", "--ssd_capacity_bytes=4210688"};
  std::filesystem::create_directories(fs.path() + "/ssd");
  std::vector<std::pair<std::string, std::string>> conv = {{"user", "Remember the number forty-two."}};
  {
    auto s = ServerProcess::Start(flags);
    ASSERT_TRUE(s.ok()) << s.status();
    Turn first = Chat((*s)->target(), "kept", conv, /*persist=*/true);
    ASSERT_TRUE(first.status.ok()) << first.status.error_message();
    ASSERT_TRUE(first.done.persisted());
    conv.push_back({"assistant", first.text});
    EXPECT_EQ((*s)->Stop(), 0);
  }
  FillUp(fs.path() + "/filler");
  auto s = ServerProcess::Start(flags);
  ASSERT_TRUE(s.ok()) << "a full disk under the index must not stop the server: " << s.status();
  ServerProcess& server = **s;
  EXPECT_EQ(Metric(server, "strata_ssd_degraded"), 1) << "the full disk was not reported";
  conv.push_back({"user", "Which number?"});
  Turn second = Chat(server.target(), "kept", conv, /*persist=*/false);
  Turn want = Chat(cache_off_->target(), "kept", conv, false);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.tokens, want.tokens);
  EXPECT_GT(second.done.usage().cached_tokens(), 0u) << "the persisted session was not served";
  Turn fresh = Chat(server.target(), "fresh", {{"user", "A new session."}}, /*persist=*/true);
  ASSERT_TRUE(fresh.status.ok()) << fresh.status.error_message();
  EXPECT_FALSE(fresh.done.persisted()) << "persisted on a full disk?";
  // Room again: persisting resumes within a sweep interval (10 s), with no restart.
  std::filesystem::remove(fs.path() + "/filler");
  for (int i = 0; i < 300 && Metric(server, "strata_ssd_degraded") != 0; ++i) absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Metric(server, "strata_ssd_degraded"), 0) << "did not recover once the disk had room";
  Turn again = Chat(server.target(), "fresh2", {{"user", "Another new session."}}, /*persist=*/true);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_TRUE(again.done.persisted());
  EXPECT_EQ(server.Stop(), 0);
}

}  // namespace
}  // namespace strata
