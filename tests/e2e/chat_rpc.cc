#include "tests/e2e/chat_rpc.h"

#include <chrono>

#include "server/session_header.h"

namespace strata::testing {

v1::ChatRequest MessagesRequest(const std::string& session,
                                const std::vector<std::pair<std::string, std::string>>& messages, int max_new) {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(static_cast<uint32_t>(max_new));
  for (const auto& [role, content] : messages) {
    v1::Message* m = r.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return r;
}

ChatTurn RunChat(const std::string& target, const v1::ChatRequest& request, const std::string& api_key) {
  auto stub = v1::ChatService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  // A safety net, not a timing check: 64 sessions at once on a cache-off server under ASan
  // on two cores took past two minutes.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  ctx.AddMetadata(server::kSessionHeader, request.session_id());
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  auto reader = stub->Chat(&ctx, request);
  ChatTurn t;
  v1::ChatEvent e;
  while (reader->Read(&e)) {
    if (e.has_delta()) {
      t.tokens.insert(t.tokens.end(), e.delta().token_ids().begin(), e.delta().token_ids().end());
      t.text += e.delta().text();
    }
    if (e.has_done()) t.done = e.done();
  }
  t.status = reader->Finish();
  return t;
}

absl::StatusOr<v1::SessionInfo> GetSessionInfo(const std::string& target, const std::string& session_id) {
  auto stub = v1::CacheService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::GetSessionRequest req;
  req.set_session_id(session_id);
  v1::SessionInfo info;
  grpc::Status s = stub->GetSession(&ctx, req, &info);
  if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return info;
}

}  // namespace strata::testing
