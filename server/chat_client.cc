#include "server/chat_client.h"

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <functional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "server/session_header.h"
#include "strata/v1/chat.grpc.pb.h"

namespace strata::server {
namespace {

const char* TierLabel(v1::Tier tier) {
  switch (tier) {
    case v1::TIER_HBM: return "hbm";
    case v1::TIER_HOST: return "host";
    case v1::TIER_SSD: return "ssd";
    default: return "none (miss)";
  }
}

struct TurnOutcome {
  grpc::Status status;
  std::string answer;
  v1::ChatDone done;
};

// One turn of the conversation in `request` (whose last message is the user's), its
// answer's text handed to `on_text` as it streams.
TurnOutcome SendTurn(v1::ChatService::Stub& stub, const ChatScriptOptions& options, const v1::ChatRequest& request,
                     const std::function<void(const std::string&)>& on_text) {
  grpc::ClientContext context;
  if (!options.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options.api_key);
  context.AddMetadata(kSessionHeader, options.session_id);  // for session-affine proxies
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  auto reader = stub.Chat(&context, request);
  TurnOutcome out;
  v1::ChatEvent event;
  while (reader->Read(&event)) {
    if (event.has_delta() && !event.delta().text().empty()) {
      out.answer += event.delta().text();
      on_text(event.delta().text());
    }
    if (event.has_done()) out.done = event.done();
  }
  out.status = reader->Finish();
  return out;
}

v1::ChatRequest NewRequest(const ChatScriptOptions& options) {
  v1::ChatRequest request;
  request.set_session_id(options.session_id);
  request.set_max_new_tokens(static_cast<uint32_t>(options.max_new_tokens));
  request.mutable_sampling()->set_temperature(options.temperature);
  request.mutable_sampling()->set_top_p(options.top_p);
  request.mutable_sampling()->set_seed(options.seed);
  return request;
}

void AddMessage(v1::ChatRequest& request, const char* role, const std::string& content) {
  v1::Message* m = request.add_messages();
  m->set_role(role);
  m->set_content(content);
}

void PrintError(size_t turn, const grpc::Status& status) {
  std::fprintf(stderr, "turn %zu failed: %s: %s\n", turn,
               absl::StrFormat("code %d", status.error_code()).c_str(), status.error_message().c_str());
}

}  // namespace

void PrintTurnStatus(std::FILE* out, size_t turn, const v1::ChatDone& done) {
  const v1::Usage& u = done.usage();
  std::fprintf(out, "\n  [turn %zu: TTFT %.1f ms; %u prompt tokens, %u reused, %u computed; tier %s]\n", turn,
               done.ttft_ms(), u.prompt_tokens(), u.cached_tokens(), u.computed_tokens(), TierLabel(done.cache_tier()));
}

int RunChatScript(const ChatScriptOptions& options) {
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel(options.target, grpc::InsecureChannelCredentials()));
  v1::ChatRequest request = NewRequest(options);
  for (size_t turn = 0; turn < options.user_turns.size(); ++turn) {
    AddMessage(request, "user", options.user_turns[turn]);
    std::printf("you> %s\nstrata> ", options.user_turns[turn].c_str());
    std::fflush(stdout);
    const TurnOutcome t = SendTurn(*stub, options, request, [](const std::string& text) {
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    });
    if (!t.status.ok()) {
      std::printf("\n");
      PrintError(turn + 1, t.status);
      return 1;
    }
    PrintTurnStatus(stdout, turn + 1, t.done);
    AddMessage(request, "assistant", t.answer);
  }
  return 0;
}

int RunInteractiveChat(const ChatScriptOptions& options, std::FILE* in, std::FILE* out) {
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel(options.target, grpc::InsecureChannelCredentials()));
  v1::ChatRequest request = NewRequest(options);
  std::fprintf(out, "session '%s' on %s; type a message, /quit to leave\n", options.session_id.c_str(),
               options.target.c_str());
  size_t turn = 0;
  char buffer[8192];
  for (;;) {
    std::fprintf(out, "you> ");
    std::fflush(out);
    if (std::fgets(buffer, sizeof(buffer), in) == nullptr) break;
    const std::string line(absl::StripAsciiWhitespace(buffer));
    if (line.empty()) continue;
    if (line == "/quit") break;
    AddMessage(request, "user", line);
    std::fprintf(out, "strata> ");
    const TurnOutcome t = SendTurn(*stub, options, request, [out](const std::string& text) {
      std::fputs(text.c_str(), out);
      std::fflush(out);
    });
    ++turn;
    if (!t.status.ok()) {
      std::fprintf(out, "\n");
      PrintError(turn, t.status);
      request.mutable_messages()->RemoveLast();  // the turn did not happen
      continue;
    }
    AddMessage(request, "assistant", t.answer);
    PrintTurnStatus(out, turn, t.done);
  }
  std::fprintf(out, "\n");
  return 0;
}

}  // namespace strata::server
