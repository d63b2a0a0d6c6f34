// End-to-end: shared system prompts on a real `strata serve`. 64 concurrent sessions over
// three system prompts answer exactly as a cache-off server with the prompts inline; each
// prompt is computed once and stored once; registered prompts are named by id, survive a
// restart (the KV from SSD, the registration from its file); bad input gets clear codes.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "strata/v1/system_prompts.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;
using Turn = testing::ChatTurn;

// A system prompt of a few hundred byte tokens (the built-in tokenizer: one per byte).
std::string SystemText(int k) {
  std::string text = absl::StrCat("You are assistant number ", k, ". ");
  while (text.size() < 300) absl::StrAppend(&text, "Answer briefly, cite rule ", text.size() % 97, ". ");
  return text;
}

v1::ChatRequest Request(const std::string& session, const std::vector<std::pair<std::string, std::string>>& messages,
                        int max_new = 8) {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(max_new);
  for (const auto& [role, content] : messages) {
    v1::Message* m = r.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return r;
}

std::map<std::string, double> Metrics(const ServerProcess& server) {
  auto body = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  auto samples = metrics::ParsePrometheusText(body.ok() ? *body : "");
  EXPECT_TRUE(samples.ok());
  return samples.ok() ? *samples : std::map<std::string, double>{};
}

// Each request on the cache-on server and on the cache-off one, all at once (a thread a
// request): every turn ok, the answers equal, and each cache-on turn reading at least the
// 300-token system prompt from its shared KV. The cache-on turns, then the cache-off ones.
std::pair<std::vector<testing::ChatTurn>, std::vector<testing::ChatTurn>> RunOnBoth(
    const std::string& on, const std::string& off, const std::vector<v1::ChatRequest>& requests) {
  const size_t n = requests.size();
  std::vector<testing::ChatTurn> shared(n), plain(n);
  std::vector<std::thread> threads;
  for (size_t s = 0; s < n; ++s) {
    threads.emplace_back([&, s] {
      shared[s] = testing::RunChat(on, requests[s]);
      plain[s] = testing::RunChat(off, requests[s]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t s = 0; s < n; ++s) {
    EXPECT_TRUE(shared[s].status.ok()) << s << ": " << shared[s].status.error_message();
    EXPECT_TRUE(plain[s].status.ok()) << s << ": " << plain[s].status.error_message();
    if (!shared[s].status.ok() || !plain[s].status.ok()) continue;
    EXPECT_EQ(shared[s].tokens, plain[s].tokens) << "session " << s;
    EXPECT_GE(shared[s].done.usage().cached_tokens(), 300u) << "session " << s << " did not share its system prompt";
  }
  return {std::move(shared), std::move(plain)};
}

class Prompts {
 public:
  Prompts(const std::string& target, const std::string& api_key = "")
      : stub_(v1::SystemPromptService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))),
        api_key_(api_key) {}
  grpc::Status Register(const v1::RegisterSystemPromptRequest& req, v1::RegisterSystemPromptResponse* resp) {
    grpc::ClientContext ctx;
    Auth(ctx);
    return stub_->RegisterSystemPrompt(&ctx, req, resp);
  }
  grpc::Status Drop(const std::string& id) {
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::DropSystemPromptRequest req;
    req.set_id(id);
    v1::DropSystemPromptResponse resp;
    return stub_->DropSystemPrompt(&ctx, req, &resp);
  }
  v1::ListSystemPromptsResponse List() {
    grpc::ClientContext ctx;
    Auth(ctx);
    v1::ListSystemPromptsResponse resp;
    EXPECT_TRUE(stub_->ListSystemPrompts(&ctx, v1::ListSystemPromptsRequest(), &resp).ok());
    return resp;
  }

 private:
  void Auth(grpc::ClientContext& ctx) const {
    if (!api_key_.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key_);
  }
  std::unique_ptr<v1::SystemPromptService::Stub> stub_;
  std::string api_key_;
};

class SystemPromptE2eTest : public ::testing::Test {
 protected:
  std::unique_ptr<ServerProcess> Start(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--device=cpu", "--ssd_dirs=" + dir_ + "/ssd", "--ssd_capacity_bytes=268435456"});
    std::filesystem::create_directories(dir_ + "/ssd");
    auto s = ServerProcess::Start(flags);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  storage::testing::TempDir tmp_{"strata-prompt-e2e"};
  std::string dir_ = tmp_.path();
};

TEST_F(SystemPromptE2eTest, SixtyFourSessionsOverThreePromptsAnswerAsTheCacheOffServer) {
  auto server = Start({});
  auto off = ServerProcess::Start({"--cache=off", "--device=cpu"});
  ASSERT_TRUE(server != nullptr && off.ok());
  constexpr int kSessions = 64;
  std::vector<v1::ChatRequest> requests;
  for (int s = 0; s < kSessions; ++s) {
    requests.push_back(Request(absl::StrCat("s", s), {{"system", SystemText(s % 3)},
                                                       {"user", absl::StrCat("Question ", s, ": what is ", s * 7, "?")}}));
  }
  const auto [shared, plain] = RunOnBoth(server->target(), (*off)->target(), requests);
  ASSERT_FALSE(::testing::Test::HasFailure()) << "a turn failed or differed: turn 2 below builds on them";
  for (int s = 0; s < kSessions; ++s) EXPECT_EQ(plain[s].done.usage().cached_tokens(), 0u);
  std::map<std::string, double> m = Metrics(*server);
  EXPECT_EQ(m["strata_system_prompt_loads_total{source=\"computed\"}"], 3) << "each prompt computed once";
  EXPECT_EQ(m["strata_system_prompt_hits_total"], kSessions);
  EXPECT_EQ(m["strata_system_prompts"], 3);

  // Stored once: three prompts listed, and each session stores only its own tokens.
  Prompts prompts(server->target());
  v1::ListSystemPromptsResponse listed = prompts.List();
  ASSERT_EQ(listed.prompts_size(), 3);
  for (const v1::SystemPromptInfo& p : listed.prompts()) {
    EXPECT_GE(p.tokens(), 300u);
    EXPECT_TRUE(p.resident());
    EXPECT_FALSE(p.registered()) << "recognised in conversations, not registered";
  }
  auto info = testing::GetSessionInfo(server->target(), "s5");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_LT(info->cached_tokens(), 100u) << "a session stored its system prompt's tokens again";
  auto cache = v1::CacheService::NewStub(grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::ListSessionsResponse sessions;
  ASSERT_TRUE(cache->ListSessions(&ctx, v1::ListSessionsRequest(), &sessions).ok());
  EXPECT_EQ(sessions.sessions_size(), kSessions) << "the prompts' own KV is not a client's session";

  // Turn 2 of a session, the conversation resent whole: its own history and the prompt reused.
  v1::ChatRequest again = requests[5];
  v1::Message* answer = again.add_messages();
  answer->set_role("assistant");
  answer->set_content(shared[5].text);
  v1::Message* next = again.add_messages();
  next->set_role("user");
  next->set_content("And then?");
  const Turn two = testing::RunChat(server->target(), again);
  const Turn two_plain = testing::RunChat((*off)->target(), again);
  ASSERT_TRUE(two.status.ok()) << two.status.error_message();
  EXPECT_EQ(two.tokens, two_plain.tokens);
  EXPECT_GT(two.done.usage().cached_tokens(), shared[5].done.usage().cached_tokens());
}

TEST_F(SystemPromptE2eTest, ConversationsTheAssistantOpensShareTheirSystemPrompt) {
  // A greeting from the assistant before the user's first message: the system part is
  // shared (computed once) as in conversations the user opens, and the answers are the
  // cache-off server's.
  auto server = Start({});
  auto off = ServerProcess::Start({"--cache=off", "--device=cpu"});
  ASSERT_TRUE(server != nullptr && off.ok());
  constexpr int kSessions = 4;
  std::vector<v1::ChatRequest> requests;
  for (int s = 0; s < kSessions; ++s) {
    requests.push_back(Request(absl::StrCat("g", s), {{"system", SystemText(7)},
                                                      {"assistant", "Hello! What can I do for you?"},
                                                      {"user", absl::StrCat("Tell me about ", s * 11, ".")}}));
  }
  RunOnBoth(server->target(), (*off)->target(), requests);
  std::map<std::string, double> m = Metrics(*server);
  EXPECT_EQ(m["strata_system_prompt_loads_total{source=\"computed\"}"], 1) << "the prompt computed once";
  EXPECT_EQ(m["strata_system_prompt_hits_total"], kSessions);
}

TEST_F(SystemPromptE2eTest, RegisteredPromptsAreNamedByIdAndSurviveARestart) {
  auto off = ServerProcess::Start({"--cache=off", "--device=cpu"});
  ASSERT_TRUE(off.ok());
  std::string text_id, token_id;
  const std::vector<int32_t> token_prompt = [] {
    std::vector<int32_t> t;
    for (int i = 0; i < 200; ++i) t.push_back(40 + i % 60);
    return t;
  }();
  const v1::ChatRequest inline_request = Request("x", {{"system", SystemText(7)}, {"user", "Hello there"}});
  const Turn reference = testing::RunChat((*off)->target(), inline_request);
  ASSERT_TRUE(reference.status.ok());
  v1::ChatRequest by_tokens;
  by_tokens.set_session_id("t1");
  by_tokens.set_max_new_tokens(8);
  for (int32_t t : token_prompt) by_tokens.add_token_ids(t);
  for (int32_t t : {72, 105, 33}) by_tokens.add_token_ids(t);
  const Turn reference_tokens = testing::RunChat((*off)->target(), by_tokens);
  ASSERT_TRUE(reference_tokens.status.ok());
  {
    auto server = Start({});
    Prompts prompts(server->target());
    v1::RegisterSystemPromptRequest req;
    req.set_text(SystemText(7));
    v1::RegisterSystemPromptResponse resp;
    ASSERT_TRUE(prompts.Register(req, &resp).ok());
    text_id = resp.id();
    EXPECT_GE(resp.tokens(), 300u);
    EXPECT_TRUE(resp.shared());
    v1::RegisterSystemPromptResponse again;
    ASSERT_TRUE(prompts.Register(req, &again).ok());
    EXPECT_EQ(again.id(), text_id) << "registering is idempotent";
    // Shorter than --min_shared_prompt_tokens: named, not shared; its turns compute it.
    v1::RegisterSystemPromptRequest short_req;
    short_req.set_text("Be brief.");
    v1::RegisterSystemPromptResponse short_resp;
    ASSERT_TRUE(prompts.Register(short_req, &short_resp).ok());
    EXPECT_FALSE(short_resp.shared());
    v1::ChatRequest short_named = Request("short", {{"user", "Hello there"}});
    short_named.set_system_prompt_id(short_resp.id());
    const Turn short_turn = testing::RunChat(server->target(), short_named);
    ASSERT_TRUE(short_turn.status.ok()) << short_turn.status.error_message();
    EXPECT_EQ(short_turn.done.usage().cached_tokens(), 0u);
    EXPECT_TRUE(prompts.Drop(short_resp.id()).ok()) << "registered, never held";
    v1::RegisterSystemPromptRequest treq;
    for (int32_t t : token_prompt) treq.add_token_ids(t);
    ASSERT_TRUE(prompts.Register(treq, &resp).ok());
    token_id = resp.id();

    v1::ChatRequest named = Request("a", {{"user", "Hello there"}});
    named.set_system_prompt_id(text_id);
    named.set_persist(true);
    const Turn a = testing::RunChat(server->target(), named);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.tokens, reference.tokens) << "the prompt by id answers as the prompt inline";
    EXPECT_TRUE(a.done.persisted());
    v1::ChatRequest tokens_named;
    tokens_named.set_session_id("t1");
    tokens_named.set_max_new_tokens(8);
    tokens_named.set_system_prompt_id(token_id);
    for (int32_t t : {72, 105, 33}) tokens_named.add_token_ids(t);
    const Turn t1 = testing::RunChat(server->target(), tokens_named);
    ASSERT_TRUE(t1.status.ok()) << t1.status.error_message();
    EXPECT_EQ(t1.tokens, reference_tokens.tokens);
    EXPECT_EQ(t1.done.usage().cached_tokens(), 200u);
    // Persisted before the restart: the prompts' KV is on SSD once the write-backs land.
    for (int i = 0; i < 100; ++i) {
      v1::ListSystemPromptsResponse l = prompts.List();
      if (l.prompts_size() == 2 && l.prompts(0).persisted() && l.prompts(1).persisted()) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_EQ(server->Stop(), 0);
  }
  auto server = Start({});
  Prompts prompts(server->target());
  v1::ListSystemPromptsResponse listed = prompts.List();
  ASSERT_EQ(listed.prompts_size(), 2);
  for (const v1::SystemPromptInfo& p : listed.prompts()) {
    EXPECT_TRUE(p.registered()) << p.id();
    EXPECT_TRUE(p.persisted()) << p.id();
    EXPECT_FALSE(p.resident()) << p.id();
  }
  v1::ChatRequest named = Request("b", {{"user", "Hello there"}});
  named.set_system_prompt_id(text_id);
  const Turn b = testing::RunChat(server->target(), named);
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(b.tokens, reference.tokens);
  std::map<std::string, double> m = Metrics(*server);
  EXPECT_EQ(m["strata_system_prompt_loads_total{source=\"stored\"}"], 1) << "after the restart, from SSD";
  EXPECT_EQ(m["strata_system_prompts_stored{tier=\"ssd\"}"], 2) << "both prompts persisted";
  EXPECT_GT(m["strata_system_prompt_stored_bytes"], 0);
  EXPECT_EQ(m["strata_system_prompt_loads_total{source=\"computed\"}"], 0);
  // By id in a conversation the assistant opens: its part (without the user's header) is
  // recognised and shared too, and it answers as the same conversation inline, cache off.
  v1::ChatRequest greeted = Request("greeted", {{"assistant", "Hi! Ask away."}, {"user", "Hello there"}});
  greeted.set_system_prompt_id(text_id);
  const Turn g = testing::RunChat(server->target(), greeted);
  const Turn g_inline = testing::RunChat(
      (*off)->target(),
      Request("greeted", {{"system", SystemText(7)}, {"assistant", "Hi! Ask away."}, {"user", "Hello there"}}));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  ASSERT_TRUE(g_inline.status.ok()) << g_inline.status.error_message();
  EXPECT_EQ(g.tokens, g_inline.tokens);
  EXPECT_GE(g.done.usage().cached_tokens(), 300u) << "the registered prompt's text was not shared";
}

TEST_F(SystemPromptE2eTest, BadInputGetsClearCodesAndChangesNothing) {
  auto server = Start({"--api_keys=ka=alpha,kb=beta"});
  Prompts alpha(server->target(), "ka"), beta(server->target(), "kb");
  v1::RegisterSystemPromptRequest req;
  req.set_text(SystemText(1));
  v1::RegisterSystemPromptResponse resp;
  ASSERT_TRUE(alpha.Register(req, &resp).ok());
  const std::string id = resp.id();

  auto chat = [&](v1::ChatRequest r, const std::string& key) {
    auto stub = v1::ChatService::NewStub(grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + key);
    auto reader = stub->Chat(&ctx, r);
    v1::ChatEvent e;
    int deltas = 0;
    while (reader->Read(&e)) deltas += e.has_delta();
    return std::make_pair(reader->Finish(), deltas);
  };
  v1::ChatRequest named = Request("s", {{"user", "Hi"}}, 64);
  named.set_system_prompt_id(id);
  EXPECT_EQ(chat(named, "kb").first.error_code(), grpc::StatusCode::NOT_FOUND) << "another tenant's prompt";
  EXPECT_EQ(beta.Drop(id).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::ChatRequest unknown = named;
  unknown.set_system_prompt_id("sp-00000000000000000000000000000000");
  EXPECT_EQ(chat(unknown, "ka").first.error_code(), grpc::StatusCode::NOT_FOUND);
  unknown.set_system_prompt_id("not an id");
  EXPECT_EQ(chat(unknown, "ka").first.error_code(), grpc::StatusCode::NOT_FOUND);
  v1::ChatRequest with_system = Request("s", {{"system", "another"}, {"user", "Hi"}});
  with_system.set_system_prompt_id(id);
  EXPECT_EQ(chat(with_system, "ka").first.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ChatRequest prefix_too_long;
  prefix_too_long.set_session_id("s");
  prefix_too_long.set_max_new_tokens(4);
  for (int32_t t : {1, 2, 3}) prefix_too_long.add_token_ids(t);
  prefix_too_long.set_system_prefix_tokens(3);
  EXPECT_EQ(chat(prefix_too_long, "ka").first.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ChatRequest control = Request("bad\x01id", {{"user", "Hi"}});
  EXPECT_EQ(chat(control, "ka").first.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::RegisterSystemPromptRequest two_forms;
  two_forms.set_text("a");
  two_forms.add_token_ids(5);
  EXPECT_EQ(alpha.Register(two_forms, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::RegisterSystemPromptRequest user_message;
  v1::Message* m = user_message.add_messages();
  m->set_role("user");
  m->set_content("not a system message");
  EXPECT_EQ(alpha.Register(user_message, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::RegisterSystemPromptRequest too_long;
  for (int i = 0; i < 9000; ++i) too_long.add_token_ids(65);
  EXPECT_EQ(alpha.Register(too_long, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(alpha.List().prompts_size(), 1) << "a refused registration changed the list";
  EXPECT_EQ(beta.List().prompts_size(), 0) << "another tenant's prompts are listed";

  // Dropped while a turn runs on it: the turn finishes; later calls naming it: NOT_FOUND.
  std::pair<grpc::Status, int> running;
  std::thread t([&] { running = chat(named, "ka"); });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(alpha.Drop(id).ok());
  t.join();
  EXPECT_TRUE(running.first.ok()) << running.first.error_message();
  EXPECT_GT(running.second, 0);
  EXPECT_EQ(chat(named, "ka").first.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(alpha.Drop(id).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(alpha.List().prompts_size(), 0);
}

}  // namespace
}  // namespace strata
