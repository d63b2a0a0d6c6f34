#include "server/chat_client.h"

#include <grpcpp/grpcpp.h>

#include <cstdio>

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

}  // namespace

int RunChatScript(const ChatScriptOptions& options) {
  auto channel = grpc::CreateChannel(options.target, grpc::InsecureChannelCredentials());
  auto stub = v1::ChatService::NewStub(channel);
  v1::ChatRequest request;
  request.set_session_id(options.session_id);
  request.set_max_new_tokens(static_cast<uint32_t>(options.max_new_tokens));
  std::printf("%-5s %9s %7s %7s %9s  %-12s %s\n", "turn", "ttft_ms", "prompt", "reused",
              "computed", "tier", "answer");
  for (size_t turn = 0; turn < options.user_turns.size(); ++turn) {
    v1::Message* user = request.add_messages();
    user->set_role("user");
    user->set_content(options.user_turns[turn]);
    grpc::ClientContext context;
    if (!options.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options.api_key);
    context.AddMetadata(kSessionHeader, options.session_id);  // for session-affine proxies
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    auto reader = stub->Chat(&context, request);
    std::string answer;
    v1::ChatEvent event;
    v1::ChatDone done;
    while (reader->Read(&event)) {
      if (event.has_delta()) answer += event.delta().text();
      if (event.has_done()) done = event.done();
    }
    grpc::Status status = reader->Finish();
    if (!status.ok()) {
      std::fprintf(stderr, "turn %zu failed: %s: %s\n", turn + 1,
                   absl::StrFormat("code %d", status.error_code()).c_str(),
                   status.error_message().c_str());
      return 1;
    }
    std::string shown = answer.size() > 40 ? answer.substr(0, 40) + "..." : answer;
    for (char& c : shown) if (c == '\n') c = ' ';
    std::printf("%-5zu %9.1f %7u %7u %9u  %-12s %s\n", turn + 1, done.ttft_ms(),
                done.usage().prompt_tokens(), done.usage().cached_tokens(),
                done.usage().computed_tokens(), TierLabel(done.cache_tier()), shown.c_str());
    v1::Message* assistant = request.add_messages();
    assistant->set_role("assistant");
    assistant->set_content(answer);
  }
  return 0;
}

}  // namespace strata::server
