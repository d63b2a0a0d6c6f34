// BatchService against a real `strata serve`: every result equals that prompt alone through
// Chat on a server with the cache off; the plan shares the documents' prefixes; bad prompts
// get their own errors and the rest completes; a chat turn sent during a batch goes first;
// `strata batch` turns a JSONL file (malformed lines included) into result lines.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "strata/v1/batch.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata::testing {
namespace {

struct BatchCall {
  grpc::Status status;
  std::vector<v1::BatchEvent> events;
  std::map<std::string, v1::BatchResult> results;  // by id
  v1::BatchPlanInfo plan;
  v1::BatchSummary summary;
};

// Sends `requests` as one BatchGenerate call and reads every event; `on_event` sees each.
BatchCall RunBatch(const std::string& target, const std::vector<v1::BatchRequest>& requests,
                   const std::function<void(const v1::BatchEvent&)>& on_event = nullptr) {
  auto stub = v1::BatchService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  auto call = stub->BatchGenerate(&context);
  for (const v1::BatchRequest& r : requests) call->Write(r);
  call->WritesDone();
  BatchCall out;
  v1::BatchEvent e;
  while (call->Read(&e)) {
    if (on_event) on_event(e);
    out.events.push_back(e);
    if (e.has_plan()) out.plan = e.plan();
    if (e.has_result()) out.results[e.result().id()] = e.result();
    if (e.has_summary()) out.summary = e.summary();
  }
  out.status = call->Finish();
  return out;
}

v1::BatchRequest Prompt(const std::string& id, const std::vector<std::pair<std::string, std::string>>& messages,
                        int max_new_tokens) {
  v1::BatchRequest r;
  v1::BatchPrompt* p = r.mutable_prompt();
  p->set_id(id);
  for (const auto& [role, content] : messages) {
    v1::Message* m = p->add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  p->set_max_new_tokens(static_cast<uint32_t>(max_new_tokens));
  return r;
}

// A system prompt, 3 documents and 4 questions on each: two levels of sharing.
std::vector<v1::BatchRequest> DocumentBatch(int questions = 4, int max_new_tokens = 8) {
  const std::string system = "You answer questions about the document you are given, briefly and exactly.";
  std::vector<v1::BatchRequest> out;
  for (int d = 0; d < 3; ++d) {
    std::string doc = absl::StrCat("Document ", d, ". ");
    for (int k = 0; k < 5; ++k) absl::StrAppend(&doc, "The ", d, " mill stood by the river for ", k, " years. ");
    for (int q = 0; q < questions; ++q) {
      out.push_back(Prompt(absl::StrCat("d", d, "q", q),
                           {{"system", system}, {"user", absl::StrCat(doc, "\nQuestion ", q, ": how long?")}},
                           max_new_tokens + q));
    }
  }
  return out;
}

TEST(BatchE2eTest, ResultsEqualEachPromptAloneThroughChatWithTheCacheOff) {
  auto batch_server = ServerProcess::Start({});
  ASSERT_TRUE(batch_server.ok()) << batch_server.status();
  auto plain = ServerProcess::Start({"--cache=off"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  const auto requests = DocumentBatch();
  const BatchCall call = RunBatch((*batch_server)->target(), requests);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_EQ(call.results.size(), requests.size());
  ASSERT_TRUE(call.events.front().has_plan()) << "the plan comes first";
  ASSERT_TRUE(call.events.back().has_summary()) << "the summary comes last";
  EXPECT_EQ(call.plan.prompts(), requests.size());
  EXPECT_EQ(call.plan.groups(), 3u) << "one group per document";
  EXPECT_GT(call.plan.token_saving_ratio(), 0.5);
  EXPECT_LE(call.plan.token_saving_ratio(), call.plan.ideal_token_saving_ratio());
  EXPECT_EQ(call.summary.completed(), requests.size());
  EXPECT_EQ(call.summary.failed(), 0u);
  uint64_t computed = 0, cached = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const v1::BatchPrompt& p = requests[i].prompt();
    const v1::BatchResult& r = call.results.at(p.id());
    ASSERT_FALSE(r.has_error()) << r.error().message();
    EXPECT_EQ(r.index(), i);
    v1::ChatRequest chat;
    chat.set_session_id(absl::StrCat("alone-", p.id()));
    *chat.mutable_messages() = p.messages();
    chat.set_max_new_tokens(p.max_new_tokens());
    const ChatTurn alone = RunChat((*plain)->target(), chat);
    ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
    EXPECT_EQ(std::vector<int32_t>(r.token_ids().begin(), r.token_ids().end()), alone.tokens) << p.id();
    EXPECT_EQ(r.text(), alone.text) << p.id();
    EXPECT_EQ(r.usage().prompt_tokens(), alone.done.usage().prompt_tokens());
    EXPECT_GT(r.usage().cached_tokens(), 0u) << p.id() << " read its document's shared prefix";
    computed += r.usage().computed_tokens();
    cached += r.usage().cached_tokens();
  }
  // What the prompts computed, plus each group's prefix once, is what the plan said.
  EXPECT_LT(computed, call.plan.computed_tokens());
  EXPECT_EQ(computed + cached, call.plan.prompt_tokens());
}

TEST(BatchE2eTest, BadPromptsGetTheirOwnErrorsAndTheRestCompletes) {
  auto server = ServerProcess::Start({"--max_context=512"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto requests = DocumentBatch(2);
  requests.push_back(Prompt("", {{"user", "no id"}}, 4));                      // 6: empty id
  requests.push_back(Prompt("d0q0", {{"user", "a repeated id"}}, 4));          // 7: repeated id
  requests.push_back(Prompt("long", {{"user", std::string(2000, 'x')}}, 4));   // 8: over the context
  requests.push_back(Prompt("role", {{"wizard", "an unknown role"}}, 4));      // 9: bad message
  v1::BatchRequest both = Prompt("both", {{"user", "hi"}}, 4);                  // 10: messages and tokens
  both.mutable_prompt()->add_token_ids(1);
  requests.push_back(both);
  const BatchCall call = RunBatch((*server)->target(), requests);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_EQ(call.summary.completed(), 6u);
  EXPECT_EQ(call.summary.failed(), 5u);
  std::map<uint32_t, v1::BatchResult> by_index;
  for (const v1::BatchEvent& e : call.events) {
    if (e.has_result()) by_index[e.result().index()] = e.result();
  }
  ASSERT_EQ(by_index.size(), requests.size());
  for (uint32_t i = 0; i < 6; ++i) EXPECT_FALSE(by_index[i].has_error()) << i << ": " << by_index[i].error().message();
  for (uint32_t i = 6; i < 11; ++i) {
    EXPECT_EQ(by_index[i].error().code(), grpc::StatusCode::INVALID_ARGUMENT) << i;
    EXPECT_FALSE(by_index[i].error().message().empty());
  }
  EXPECT_NE(by_index[8].error().message().find("context"), std::string::npos) << by_index[8].error().message();
  EXPECT_NE(by_index[7].error().message().find("d0q0"), std::string::npos) << by_index[7].error().message();

  // Whole-call refusals change nothing.
  EXPECT_EQ(RunBatch((*server)->target(), {}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<v1::BatchRequest> late_options = DocumentBatch(1);
  late_options.emplace_back().mutable_options()->set_planning(v1::BATCH_PLANNING_NONE);
  EXPECT_EQ(RunBatch((*server)->target(), late_options).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A message in the middle of the batch that does not parse (a prompt id that is not
// UTF-8) fails the whole call with INVALID_ARGUMENT, and nothing of it runs: before, the
// reads ended there as at the client's close, and the prompts before it ran.
TEST(BatchE2eTest, AMessageThatDoesNotParseFailsTheBatchAndRunsNothing) {
  auto server = ServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::CompletionQueue cq;
  void* tag;
  bool ok;
  auto call = generic.PrepareCall(&ctx, "/strata.v1.BatchService/BatchGenerate", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  v1::BatchRequest bad_id = Prompt("b", {{"user", "second"}}, 4);
  bad_id.mutable_prompt()->set_id("\xff\xfe");  // serialized as bytes: not UTF-8
  for (const v1::BatchRequest& r : {Prompt("a", {{"user", "first"}}, 4), bad_id, Prompt("c", {{"user", "third"}}, 4)}) {
    std::string bytes;
    ASSERT_TRUE(r.SerializePartialToString(&bytes));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    ASSERT_TRUE(cq.Next(&tag, &ok));
  }
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  int events = 0;
  for (;;) {
    grpc::ByteBuffer reply;
    call->Read(&reply, reinterpret_cast<void*>(4));
    if (!cq.Next(&tag, &ok) || !ok) break;
    ++events;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("BatchRequest"), std::string::npos) << status.error_message();
  EXPECT_EQ(events, 0) << "a batch with a malformed message ran";
}

TEST(BatchE2eTest, AChatTurnDuringABatchGoesFirst) {
  auto server = ServerProcess::Start({"--max_batch=8", "--batch_reserved_running=2"});
  ASSERT_TRUE(server.ok()) << server.status();
  const auto requests = DocumentBatch(/*questions=*/10, /*max_new_tokens=*/48);
  int results_at_chat_end = -1;
  int results = 0;
  std::thread chat_thread;
  ChatTurn chat;
  const BatchCall call = RunBatch((*server)->target(), requests, [&](const v1::BatchEvent& e) {
    if (e.has_plan()) {
      // The batch is running: a chat turn now.
      chat_thread = std::thread([&] {
        v1::ChatRequest request;
        request.set_session_id("during-the-batch");
        v1::Message* m = request.add_messages();
        m->set_role("user");
        m->set_content("Hello there.");
        request.set_max_new_tokens(4);
        chat = RunChat((*server)->target(), request);
        results_at_chat_end = results;
      });
    }
    results += e.has_result();
  });
  chat_thread.join();
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_TRUE(chat.status.ok()) << chat.status.error_message();
  EXPECT_EQ(call.results.size(), requests.size());
  // 30 prompts of 48+ tokens each, at most 6 at a time: the chat turn is long done before
  // half of them are.
  EXPECT_LT(results_at_chat_end, static_cast<int>(requests.size()) / 2) << "chat TTFT " << chat.done.ttft_ms() << " ms";
}

// `strata batch --in --out`: results as JSON lines with their input line, malformed lines
// answered with their line number, exit code 3 when some prompts failed.
TEST(BatchE2eTest, TheCliRunsAJsonlFile) {
  auto server = ServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/batch_in.jsonl", out = dir + "/batch_out.jsonl";
  {
    std::ofstream f(in);
    f << R"({"id": "a", "messages": [{"role": "user", "content": "Where is the mill?"}], "max_new_tokens": 6})" << "\n";
    f << "this is not json\n";
    f << "\n";
    f << R"({"id": "b", "token_ids": [72, 105, 33], "max_new_tokens": 5, "temperature": 0.7, "seed": 3})" << "\n";
    f << R"({"id": "c", "messages": [{"role": "user", "content": "x"}], "colour": "blue"})" << "\n";
    f << R"({"id": "d", "token_ids": [72, 999999]})" << "\n";
  }
  const std::string command = absl::StrCat(STRATA_BINARY, " batch --target=", (*server)->target(), " --in=", in,
                                           " --out=", out, " 2>", dir, "/batch_err.txt");
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << "some prompts failed";
  std::map<int, nlohmann::json> by_line;
  std::ifstream f(out);
  for (std::string line; std::getline(f, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    by_line[j["line"].get<int>()] = j;
  }
  ASSERT_EQ(by_line.size(), 5u);
  EXPECT_EQ(by_line[1]["id"], "a");
  EXPECT_EQ(by_line[1]["token_ids"].size(), by_line[1]["usage"]["completion_tokens"].get<size_t>());
  EXPECT_FALSE(by_line[1].contains("error"));
  EXPECT_EQ(by_line[2]["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(by_line[4]["id"], "b");
  EXPECT_EQ(by_line[4]["token_ids"].size(), 5u);
  EXPECT_EQ(by_line[5]["error"]["message"], "unknown key 'colour'");
  EXPECT_EQ(by_line[6]["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_NE(by_line[6]["error"]["message"].get<std::string>().find("vocabulary"), std::string::npos);
  std::ifstream err(dir + "/batch_err.txt");
  const std::string progress((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(progress.find("5/5 prompts"), std::string::npos) << progress;
  EXPECT_NE(progress.find("3 failed"), std::string::npos) << progress;
}

}  // namespace
}  // namespace strata::testing
