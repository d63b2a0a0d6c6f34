// End-to-end: a real `strata serve` process, driven over gRPC by the C++ stub.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <sys/wait.h>

#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "model/backend.h"
#include "gtest/gtest.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/cache_on_off_servers.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;

struct TurnOutput {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  v1::ChatDone done;
};

class Client {
 public:
  explicit Client(const std::string& target)
      : channel_(grpc::CreateChannel(target, grpc::InsecureChannelCredentials())),
        chat_(v1::ChatService::NewStub(channel_)),
        cache_(v1::CacheService::NewStub(channel_)) {}

  explicit Client(const std::string& target, std::string api_key) : Client(target) {
    api_key_ = std::move(api_key);
  }

  void Authorize(grpc::ClientContext& ctx) const {
    if (!api_key_.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key_);
  }

  TurnOutput Chat(const v1::ChatRequest& request) {
    grpc::ClientContext ctx;
    Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(3));
    auto reader = chat_->Chat(&ctx, request);
    TurnOutput out;
    v1::ChatEvent e;
    while (reader->Read(&e)) {
      if (e.has_delta()) {
        out.tokens.insert(out.tokens.end(), e.delta().token_ids().begin(), e.delta().token_ids().end());
        out.text += e.delta().text();
      }
      if (e.has_done()) out.done = e.done();
    }
    out.status = reader->Finish();
    return out;
  }

  // Sends `bytes` as the body of a Chat call, bypassing the stub's serialisation.
  grpc::Status ChatRaw(const std::string& bytes) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::CompletionQueue cq;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    auto call = generic.PrepareCall(&ctx, "/strata.v1.ChatService/Chat", &cq);
    void* tag;
    bool ok;
    call->StartCall(reinterpret_cast<void*>(1));
    cq.Next(&tag, &ok);
    call->Write(request, grpc::WriteOptions().set_last_message(), reinterpret_cast<void*>(2));
    cq.Next(&tag, &ok);
    grpc::ByteBuffer reply;
    call->Read(&reply, reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {}
    return status;
  }

  absl::StatusOr<v1::SessionInfo> GetSession(const std::string& id) {
    grpc::ClientContext ctx;
    Authorize(ctx);
    v1::GetSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    grpc::Status s = cache_->GetSession(&ctx, req, &info);
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return info;
  }

  v1::CacheService::Stub& cache() { return *cache_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ChatService::Stub> chat_;
  std::unique_ptr<v1::CacheService::Stub> cache_;
  std::string api_key_;
};

using testing::MessagesRequest;

const std::vector<std::string> kUserTurns = {
    "Hello! Please help me plan a trip to the mountains next month.",
    "What should I pack for three days of hiking?",
    "Great, now summarise that in one line.",
};

// Runs the scripted three turns; each turn appends the answer and the next user message.
// `tag` makes the conversation differ between sessions.
std::vector<TurnOutput> ThreeTurns(Client& client, const std::string& session, int max_new = 16,
                                   const std::string& tag = "") {
  std::vector<std::pair<std::string, std::string>> conv;
  std::vector<TurnOutput> outs;
  for (const std::string& user : kUserTurns) {
    conv.push_back({"user", user + tag});
    outs.push_back(client.Chat(MessagesRequest(session, conv, max_new)));
    EXPECT_TRUE(outs.back().status.ok()) << outs.back().status.error_message();
    conv.push_back({"assistant", outs.back().text});
  }
  return outs;
}

class ChatE2eTest : public testing::CacheOnOffServers<ChatE2eTest> {};

TEST_F(ChatE2eTest, LaterTurnsComputeExactlyTheNewTokens) {
  Client client(cache_on_->target());
  auto outs = ThreeTurns(client, "three-turns");
  EXPECT_EQ(outs[0].done.usage().cached_tokens(), 0u);
  EXPECT_EQ(outs[0].done.cache_tier(), v1::TIER_NONE);
  for (int t = 1; t < 3; ++t) {
    const v1::Usage& u = outs[t].done.usage();
    const v1::Usage& prev = outs[t - 1].done.usage();
    // The previous turn left the KV of its prompt and of every answer token it fed
    // (all but the last, which was sampled and never fed).
    const uint32_t known = prev.prompt_tokens() + prev.completion_tokens() - 1;
    EXPECT_EQ(u.cached_tokens(), known) << "turn " << t + 1;
    EXPECT_EQ(u.computed_tokens(), u.prompt_tokens() - known) << "turn " << t + 1;
    // The previous turn's KV stayed in the backend's memory (the HBM tier).
    EXPECT_EQ(outs[t].done.cache_tier(), v1::TIER_HBM);
    EXPECT_GT(outs[t].done.ttft_ms(), 0.0);
  }
  auto info = client.GetSession("three-turns");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tier(), v1::TIER_HOST);
  EXPECT_EQ(info->cached_tokens(),
            outs[2].done.usage().prompt_tokens() + outs[2].done.usage().completion_tokens() - 1);
}

TEST_F(ChatE2eTest, CachedAnswersEqualCacheOffAnswers) {
  Client on(cache_on_->target());
  Client off(cache_off_->target());
  auto a = ThreeTurns(on, "equal");
  auto b = ThreeTurns(off, "equal");
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(a[t].tokens, b[t].tokens) << "turn " << t + 1 << " differs with the cache on";
    EXPECT_EQ(b[t].done.usage().cached_tokens(), 0u);
    EXPECT_EQ(b[t].done.cache_tier(), v1::TIER_NONE);
  }
}

TEST_F(ChatE2eTest, EditedHistoryReusesOnlyTheUnchangedPrefix) {
  Client on(cache_on_->target());
  Client off(cache_off_->target());
  auto first = on.Chat(MessagesRequest("edited", {{"user", "My name is Ada and I like chess."}}));
  ASSERT_TRUE(first.status.ok());
  // The client edits its first message and goes on.
  std::vector<std::pair<std::string, std::string>> edited = {
      {"user", "My name is Bob and I like chess."}, {"assistant", first.text}, {"user", "And you?"}};
  auto cached = on.Chat(MessagesRequest("edited", edited));
  auto fresh = off.Chat(MessagesRequest("edited", edited));
  ASSERT_TRUE(cached.status.ok() && fresh.status.ok());
  // <bos> <|user|> "My name is " = 2 + 11 tokens are unchanged.
  EXPECT_EQ(cached.done.usage().cached_tokens(), 13u);
  EXPECT_EQ(cached.tokens, fresh.tokens);
}

TEST_F(ChatE2eTest, MetricsShowTheReuse) {
  Client on(cache_on_->target());
  ThreeTurns(on, "metrics");
  // The last turn's KV goes back to the host tier asynchronously (after ChatDone); the
  // session is in the HBM tier once that copy completes, which the scrape may precede.
  absl::StatusOr<std::map<std::string, double>> samples;
  for (absl::Time deadline = absl::Now() + absl::Seconds(10);;) {
    auto body = metrics::HttpGet("127.0.0.1", cache_on_->metrics_port(), "/metrics");
    ASSERT_TRUE(body.ok()) << body.status();
    samples = metrics::ParsePrometheusText(*body);
    ASSERT_TRUE(samples.ok()) << samples.status();
    // The tier's gauges are set one after another as the last turn's KV is kept: wait for
    // both (a scrape between them saw the session without its bytes, under ASan).
    auto hbm = samples->find("strata_sessions{tier=\"hbm\"}");
    auto hbm_bytes = samples->find("strata_tier_bytes{tier=\"hbm\"}");
    if ((hbm != samples->end() && hbm->second >= 1 && hbm_bytes != samples->end() && hbm_bytes->second > 0) ||
        absl::Now() > deadline) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto value = [&](const std::string& key) {
    auto it = samples->find(key);
    EXPECT_NE(it, samples->end()) << key << " missing from /metrics";
    return it == samples->end() ? -1.0 : it->second;
  };
  EXPECT_GT(value("strata_prefill_tokens_total{source=\"reused\"}"), 0);
  EXPECT_GT(value("strata_prefill_tokens_total{source=\"computed\"}"), 0);
  // Returning turns find their KV still in the backend's memory (the HBM tier).
  EXPECT_GE(value("strata_cache_hits_total{tier=\"hbm\"}"), 2);
  EXPECT_GE(value("strata_sessions{tier=\"hbm\"}"), 1);
  EXPECT_GT(value("strata_tier_bytes{tier=\"hbm\"}"), 0);
  EXPECT_GE(value("strata_cache_lookups_total"), 3);
  EXPECT_EQ(value("strata_running_turns"), 0) << "an idle server runs no turn";
  EXPECT_GE(value("strata_requests_total{code=\"ok\",method=\"strata.v1.ChatService/Chat\"}"), 3);
  EXPECT_GE(value("strata_ttft_seconds_count{tier=\"none\"}"), 1) << "turn 1 computed its prompt";
  EXPECT_GE(value("strata_ttft_seconds_count{tier=\"hbm\"}"), 2) << "returning turns by the tier that served them";
  EXPECT_GE(value("strata_inter_token_seconds_count"), 1);
  EXPECT_EQ(value("strata_kv_memory_waits_total"), 0);
  EXPECT_GT(value("strata_generated_tokens_total"), 0);
  EXPECT_GT(value("strata_tier_bytes{tier=\"host\"}"), 0);
  EXPECT_GE(value("strata_sessions{tier=\"host\"}"), 1);
  EXPECT_GE(value("strata_batch_size_count"), 1);
  // Every step timed once, by what it held: the turns so far each had a prompt step and
  // decode steps.
  EXPECT_GE(value("strata_step_seconds_count{kind=\"prefill\"}"), 1);
  EXPECT_GE(value("strata_step_seconds_count{kind=\"decode\"}"), 1);
  EXPECT_GE(value("strata_step_seconds_count{kind=\"mixed\"}"), 0) << "exported before any such step";
  EXPECT_EQ(value("strata_step_seconds_count{kind=\"prefill\"}") + value("strata_step_seconds_count{kind=\"decode\"}") +
                value("strata_step_seconds_count{kind=\"mixed\"}"),
            value("strata_batch_size_count"))
      << "one step, one batch";
  // Each turn's life: every finish reason is exported, and the turns so far each ended
  // by their stop token or length, after a queue, a prefill and a decode.
  double finished = 0;
  for (const char* reason : {"stop", "length", "cancelled", "deadline", "error", "shutdown"}) {
    finished += value(std::string("strata_finished_turns_total{reason=\"") + reason + "\"}");
  }
  EXPECT_GE(value("strata_finished_turns_total{reason=\"stop\"}") +
                value("strata_finished_turns_total{reason=\"length\"}"),
            3);
  EXPECT_EQ(value("strata_e2e_request_seconds_count"), finished) << "every ended turn is timed, once";
  for (const char* name : {"strata_queue_seconds", "strata_prefill_seconds", "strata_decode_seconds"}) {
    EXPECT_GE(value(std::string(name) + "_count"), 3) << name;
  }
  EXPECT_GE(value("strata_e2e_request_seconds_sum"),
            value("strata_queue_seconds_sum") + value("strata_prefill_seconds_sum"));
  EXPECT_EQ(value("strata_prompt_tokens_count"), finished);
  EXPECT_GT(value("strata_prompt_tokens_sum"), 0);
  EXPECT_EQ(value("strata_generation_tokens_sum"), value("strata_generated_tokens_total"))
      << "an idle server's ended turns hold every token generated";
  EXPECT_EQ(value("strata_generation_tokens_bucket{le=\"+Inf\"}"), finished);
  // The process and the build.
  EXPECT_GT(value("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(value("process_open_fds"), 3);
  EXPECT_GT(value("process_cpu_seconds_total"), 0);
  const double started = value("process_start_time_seconds");
  EXPECT_NEAR(started, absl::ToUnixSeconds(absl::Now()), 3600) << "start time is not Unix seconds";
  int build_info = 0;
  for (const auto& [key, v] : *samples) {
    if (key.rfind("strata_build_info{", 0) != 0) continue;
    ++build_info;
    EXPECT_EQ(v, 1);
    // The backend --device=auto chose: the CPU here, CUDA on a GPU machine.
    EXPECT_TRUE(key.find("device=\"cpu\"") != std::string::npos || key.find("device=\"cuda\"") != std::string::npos)
        << key;
    EXPECT_NE(key.find("model=\"random:builtin\""), std::string::npos) << "the model flag the server was given: " << key;
    EXPECT_NE(key.find("version=\""), std::string::npos) << key;
  }
  EXPECT_EQ(build_info, 1);
}

// Each bad request gets its status, and the session's stored state does not change.
TEST_F(ChatE2eTest, BadInputGetsClearStatusAndChangesNothing) {
  Client client(cache_on_->target());
  ASSERT_TRUE(client.Chat(MessagesRequest("victim", {{"user", "keep me"}}, 4)).status.ok());
  auto before = client.GetSession("victim");
  ASSERT_TRUE(before.ok());
  // strata_requests_total{method="strata.v1.ChatService/Chat",code="invalid_argument"}
  auto refused = [&]() {
    auto body = metrics::HttpGet("127.0.0.1", cache_on_->metrics_port(), "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    auto samples = metrics::ParsePrometheusText(body.ok() ? *body : "");
    EXPECT_TRUE(samples.ok()) << samples.status();
    for (const auto& [key, value] : *samples) {
      if (key.starts_with("strata_requests_total{") && key.find("method=\"strata.v1.ChatService/Chat\"") != std::string::npos &&
          key.find("code=\"invalid_argument\"") != std::string::npos) {
        return value;
      }
    }
    return 0.0;
  };
  const double refused_before = refused();
  int invalid = 0;
  auto expect = [&](const v1::ChatRequest& r, grpc::StatusCode code, const std::string& what) {
    if (code == grpc::StatusCode::INVALID_ARGUMENT) ++invalid;
    TurnOutput out = client.Chat(r);
    EXPECT_EQ(out.status.error_code(), code) << what << ": " << out.status.error_message();
    EXPECT_FALSE(out.status.error_message().empty()) << what;
    EXPECT_TRUE(out.tokens.empty()) << what;
  };
  using C = grpc::StatusCode;
  expect(MessagesRequest("", {{"user", "hi"}}), C::INVALID_ARGUMENT, "empty session id");
  expect(MessagesRequest(std::string(129, 's'), {{"user", "hi"}}), C::INVALID_ARGUMENT, "long session id");
  expect(MessagesRequest("victim", {}), C::INVALID_ARGUMENT, "empty conversation");
  expect(MessagesRequest("victim", {{"user", "keep me"}, {"wizard", "x"}}), C::INVALID_ARGUMENT, "unknown role");
  expect(MessagesRequest("victim", {{"user", std::string(9000, 'a')}}), C::INVALID_ARGUMENT, "longer than context");
  expect(MessagesRequest("victim", {{"user", "keep me"}}, 0), C::INVALID_ARGUMENT, "max_new_tokens 0");
  expect(MessagesRequest("victim", {{"user", "keep me"}}, 2000000000), C::INVALID_ARGUMENT, "absurd max_new_tokens");
  // The largest value the field holds is reported as sent, not clamped first.
  TurnOutput huge = client.Chat(MessagesRequest("victim", {{"user", "keep me"}}, 4294967295u));
  ++invalid;
  EXPECT_EQ(huge.status.error_code(), C::INVALID_ARGUMENT);
  EXPECT_NE(huge.status.error_message().find("4294967295"), std::string::npos) << huge.status.error_message();
  v1::ChatRequest both = MessagesRequest("victim", {{"user", "x"}});
  both.add_token_ids(1);
  expect(both, C::INVALID_ARGUMENT, "messages and token_ids");
  v1::ChatRequest bad_token;
  bad_token.set_session_id("victim");
  bad_token.set_max_new_tokens(4);
  bad_token.add_token_ids(1 << 20);
  expect(bad_token, C::INVALID_ARGUMENT, "token outside vocabulary");

  // Raw bytes: invalid UTF-8 in a string field, and bytes that are no protobuf at all.
  v1::ChatRequest valid = MessagesRequest("victim", {{"user", "PLACEHOLDER"}});
  std::string wire = valid.SerializeAsString();
  wire.replace(wire.find("PLACEHOLDER"), 11, "\xff\xfe\xfd invalid");
  grpc::Status utf8 = client.ChatRaw(wire);
  EXPECT_EQ(utf8.error_code(), C::INVALID_ARGUMENT) << utf8.error_message();
  grpc::Status garbage = client.ChatRaw(std::string("\x0a\xff\xff\xff\xff\x0f garbage", 12));
  EXPECT_EQ(garbage.error_code(), C::INVALID_ARGUMENT) << garbage.error_message();
  // session_id (field 1) sent as a varint instead of a string.
  grpc::Status wrong_type = client.ChatRaw(std::string("\x08\x05", 2));
  EXPECT_EQ(wrong_type.error_code(), C::INVALID_ARGUMENT) << wrong_type.error_message();
  invalid += 3;
  // Every refusal is counted, also those that never reached the handler (did not parse).
  EXPECT_EQ(refused() - refused_before, invalid);

  auto after = client.GetSession("victim");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->cached_tokens(), before->cached_tokens());
  EXPECT_EQ(after->chunks(), before->chunks());
  EXPECT_EQ(after->last_access_unix_ms(), before->last_access_unix_ms());
}

TEST_F(ChatE2eTest, CacheServiceReportsAndDropsSessions) {
  Client client(cache_on_->target());
  ASSERT_TRUE(client.Chat(MessagesRequest("to-drop", {{"user", "hello"}}, 4)).status.ok());
  grpc::ClientContext list_ctx;
  v1::ListSessionsResponse list;
  ASSERT_TRUE(client.cache().ListSessions(&list_ctx, v1::ListSessionsRequest(), &list).ok());
  bool listed = false;
  for (const auto& s : list.sessions()) listed |= s.session_id() == "to-drop";
  EXPECT_TRUE(listed);
  grpc::ClientContext drop_ctx;
  v1::DropSessionRequest drop;
  drop.set_session_id("to-drop");
  v1::DropSessionResponse dropped;
  ASSERT_TRUE(client.cache().DropSession(&drop_ctx, drop, &dropped).ok());
  EXPECT_TRUE(absl::IsNotFound(client.GetSession("to-drop").status()));
  grpc::ClientContext again_ctx;
  EXPECT_EQ(client.cache().DropSession(&again_ctx, drop, &dropped).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext stats_ctx;
  v1::StatsResponse stats;
  ASSERT_TRUE(client.cache().Stats(&stats_ctx, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.model_fingerprint().size(), 16u);
  ASSERT_EQ(stats.tiers_size(), 1);
  EXPECT_GT(stats.tiers(0).capacity_bytes(), 0u);
  ASSERT_TRUE(client.Chat(MessagesRequest("kept", {{"user", "hi"}}, 4)).status.ok());
  grpc::ClientContext prefetch_ctx;
  v1::PrefetchRequest prefetch;
  prefetch.add_session_ids("kept");
  prefetch.add_session_ids("to-drop");
  prefetch.add_session_ids("never-seen");
  v1::PrefetchResponse pr;
  ASSERT_TRUE(client.cache().Prefetch(&prefetch_ctx, prefetch, &pr).ok());
  EXPECT_EQ(pr.accepted(), 1u);  // the stored one
  // With the cache off nothing can be persisted: Flush is FAILED_PRECONDITION (cache.proto).
  Client off(cache_off_->target());
  grpc::ClientContext flush_ctx;
  v1::FlushRequest flush;
  flush.add_session_ids("kept");
  v1::FlushResponse flushed;
  EXPECT_EQ(off.cache().Flush(&flush_ctx, flush, &flushed).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ChatE2eTest, ClientThatGoesAwayFreesItsSession) {
  Client client(cache_on_->target());
  {
    grpc::ClientContext ctx;
    v1::ChatRequest long_turn = MessagesRequest("walk-away", {{"user", "talk for a long time"}}, 4000);
    auto reader = v1::ChatService::NewStub(
                      grpc::CreateChannel(cache_on_->target(), grpc::InsecureChannelCredentials()))
                      ->Chat(&ctx, long_turn);
    v1::ChatEvent e;
    ASSERT_TRUE(reader->Read(&e));  // the turn is running
    ctx.TryCancel();
    while (reader->Read(&e)) {}
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The next turn of the session is admitted (nothing stuck) and answers.
  TurnOutput next = client.Chat(MessagesRequest("walk-away", {{"user", "short one"}}, 4));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_GE(next.done.usage().completion_tokens(), 1u);
}

TEST_F(ChatE2eTest, ThirtyTwoConcurrentSessionsMatchSequentialRuns) {
  constexpr int kSessions = 32;
  Client off(cache_off_->target());
  // Sequential reference: one session after the other, cache off.
  std::vector<std::vector<TurnOutput>> reference;
  for (int i = 0; i < kSessions; ++i) reference.push_back(ThreeTurns(off, "ref", 8, " #" + std::to_string(i)));
  std::vector<std::future<std::vector<TurnOutput>>> runs;
  for (int i = 0; i < kSessions; ++i) {
    runs.push_back(std::async(std::launch::async, [this, i] {
      Client client(cache_on_->target());
      return ThreeTurns(client, "concurrent-" + std::to_string(i), 8, " #" + std::to_string(i));
    }));
  }
  for (int i = 0; i < kSessions; ++i) {
    std::vector<TurnOutput> got = runs[i].get();
    for (int t = 0; t < 3; ++t) {
      ASSERT_TRUE(got[t].status.ok()) << got[t].status.error_message();
      EXPECT_EQ(got[t].tokens, reference[i][t].tokens) << "session " << i << " turn " << t + 1;
      if (t > 0) EXPECT_GT(got[t].done.usage().cached_tokens(), 0u);
    }
  }
  // Concurrent sessions were batched together: some forward step carried several turns.
  auto body = metrics::HttpGet("127.0.0.1", cache_on_->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok());
  auto samples = metrics::ParsePrometheusText(*body);
  ASSERT_TRUE(samples.ok());
  const double single = (*samples)["strata_batch_size_bucket{le=\"1\"}"];
  const double all = (*samples)["strata_batch_size_count"];
  EXPECT_LT(single, all) << "every step carried one turn: no continuous batching";
}

TEST(TenancyE2eTest, TenantsAreIsolatedAndKeysRequired) {
  auto server = ServerProcess::Start({"--api_keys=key-a=alpha,key-b=beta"});
  ASSERT_TRUE(server.ok()) << server.status();
  Client alpha((*server)->target(), "key-a");
  Client beta((*server)->target(), "key-b");
  Client anonymous((*server)->target());
  Client forger((*server)->target(), "key-c");
  auto first = alpha.Chat(MessagesRequest("shared-id", {{"user", "alpha's secret prompt"}}, 4));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(anonymous.Chat(MessagesRequest("shared-id", {{"user", "x"}}, 4)).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(forger.Chat(MessagesRequest("shared-id", {{"user", "x"}}, 4)).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Beta sends the very same conversation under the same session ID: nothing is reused,
  // and alpha's session is invisible to it.
  EXPECT_TRUE(absl::IsNotFound(beta.GetSession("shared-id").status()));
  auto probe = beta.Chat(MessagesRequest("shared-id", {{"user", "alpha's secret prompt"}}, 4));
  ASSERT_TRUE(probe.status.ok());
  EXPECT_EQ(probe.done.usage().cached_tokens(), 0u);
  auto again = alpha.Chat(MessagesRequest("shared-id", {{"user", "alpha's secret prompt"}, {"assistant", first.text},
                                                {"user", "more"}}, 4));
  EXPECT_GT(again.done.usage().cached_tokens(), 0u);
  EXPECT_EQ((*server)->Stop() >> 8, 0);
}

// CacheService.Stats shows the caller's tenant only; the admin tenant sees every tenant.
TEST(TenancyE2eTest, StatsShowOnlyTheCallersTenant) {
  EXPECT_FALSE(ServerProcess::Start({"--api_keys=key-a=alpha", "--admin_tenant=nobody"}).ok())
      << "an admin tenant no key names must be refused";
  auto server = ServerProcess::Start({"--api_keys=key-a=alpha,key-b=beta,key-ops=ops", "--admin_tenant=ops"});
  ASSERT_TRUE(server.ok()) << server.status();
  Client alpha((*server)->target(), "key-a");
  Client beta((*server)->target(), "key-b");
  Client ops((*server)->target(), "key-ops");
  auto stats = [](Client& c) {
    grpc::ClientContext ctx;
    c.Authorize(ctx);
    v1::StatsResponse r;
    EXPECT_TRUE(c.cache().Stats(&ctx, v1::StatsRequest(), &r).ok());
    return r;
  };
  auto host = [](const v1::StatsResponse& r) {
    for (const v1::TierStats& t : r.tiers()) {
      if (t.tier() == v1::TIER_HOST) return t;
    }
    return v1::TierStats();
  };
  auto first = alpha.Chat(MessagesRequest("s", {{"user", "alpha's question"}}, 4));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  auto second = alpha.Chat(MessagesRequest("s", {{"user", "alpha's question"}, {"assistant", first.text}, {"user", "more"}}, 4));
  ASSERT_TRUE(second.status.ok());
  ASSERT_GT(second.done.usage().cached_tokens(), 0u);
  const v1::StatsResponse a = stats(alpha), b = stats(beta), all = stats(ops);
  EXPECT_EQ(a.lookups(), 2u);
  EXPECT_EQ(a.hits(), 1u);
  EXPECT_EQ(a.reused_tokens(), second.done.usage().cached_tokens());
  EXPECT_EQ(host(a).sessions(), 1u);
  EXPECT_GT(host(a).used_bytes(), 0u);
  EXPECT_EQ(b.lookups(), 0u) << "beta sees alpha's lookups";
  EXPECT_EQ(b.hits(), 0u);
  EXPECT_EQ(b.reused_tokens(), 0u);
  EXPECT_EQ(host(b).sessions(), 0u) << "beta sees alpha's sessions";
  EXPECT_EQ(host(b).used_bytes(), 0u);
  EXPECT_EQ(host(b).capacity_bytes(), host(a).capacity_bytes()) << "the capacity is the server's";
  EXPECT_EQ(all.lookups(), 2u);
  EXPECT_EQ(host(all).sessions(), 1u);
  EXPECT_EQ((*server)->Stop() >> 8, 0);
}

// --device reaches the backend: cpu serves, a name that is no device is refused at start,
// and cuda is refused at start on a machine without a GPU (where there is one, it serves).
// The answers of the CPU backend chosen explicitly equal those of the default (auto) on
// this machine.
TEST(DeviceE2eTest, DeviceFlagChoosesOrRefusesTheBackendAtStart) {
  EXPECT_FALSE(ServerProcess::Start({"--device=tpu"}).ok()) << "a device that does not exist must be refused";
  auto cuda = ServerProcess::Start({"--device=cuda"});
  EXPECT_EQ(cuda.ok(), model::CudaAvailable()) << (cuda.ok() ? "started" : cuda.status().ToString());
  auto cpu = ServerProcess::Start({"--device=cpu"});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  Client client((*cpu)->target());
  auto turn = client.Chat(MessagesRequest("device", {{"user", "which backend?"}}, 6));
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  EXPECT_EQ(turn.done.usage().completion_tokens(), 6u);
  if (!model::CudaAvailable()) {
    auto automatic = ServerProcess::Start({});
    ASSERT_TRUE(automatic.ok()) << automatic.status();
    Client other((*automatic)->target());
    EXPECT_EQ(other.Chat(MessagesRequest("device", {{"user", "which backend?"}}, 6)).tokens, turn.tokens)
        << "without a GPU, auto is the CPU backend";
    std::ifstream log((*automatic)->log_path());
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("--device=auto: no CUDA device is visible"), std::string::npos)
        << "auto must say at start which backend it chose and why:\n" << text;
  }
}

}  // namespace
}  // namespace strata
