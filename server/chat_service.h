// ChatService: validates a chat turn, hands it to the engine and streams the answer.
#ifndef STRATA_SERVER_CHAT_SERVICE_H_
#define STRATA_SERVER_CHAT_SERVICE_H_

#include "proto/request_traits.h"  // before the generated service: strict request parsing

#include <map>
#include <string>

#include "base/metrics.h"
#include "server/auth.h"
#include "engine/engine.h"
#include "server/session_header.h"
#include "server/prompt_builder.h"
#include "server/system_prompts.h"
#include "text/tokenizer.h"
#include "strata/v1/chat.grpc.pb.h"

namespace strata::server {

inline constexpr size_t kMaxSessionIdBytes = 128;
inline constexpr int kMaxMessages = 4096;

// InvalidArgument unless 1 <= bytes <= kMaxSessionIdBytes and no byte is a control
// character (the store reserves such IDs for system prompts).
absl::Status ValidateSessionId(const std::string& session_id);

class ChatServiceImpl final : public v1::ChatService::Service {
 public:
  // `store` may be null (cache off); it answers the per-turn `persist` option. `prompts`
  // resolves system_prompt_id.
  ChatServiceImpl(engine::Engine* engine, const text::Tokenizer* tokenizer, storage::SessionStore* store,
                  const SystemPromptRegistry* prompts, const ApiKeys* api_keys)
      : engine_(engine), store_(store), api_keys_(api_keys), prompts_(engine, tokenizer, prompts) {}

  grpc::Status Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                    grpc::ServerWriter<v1::ChatEvent>* writer) override;
  // Chat's turns, one after another on one call (chat.proto).
  grpc::Status ChatSession(grpc::ServerContext* context,
                           grpc::ServerReaderWriter<v1::ChatEvent, v1::ChatRequest>* stream) override;

 private:
  // One turn: validates it, runs it on the engine and writes its events; the status the
  // turn ends with.
  grpc::Status DoChat(grpc::ServerContext* context, const v1::ChatRequest& request,
                      grpc::internal::WriterInterface<v1::ChatEvent>* writer);
  engine::Engine* engine_;
  storage::SessionStore* store_;
  const ApiKeys* api_keys_;
  PromptBuilder prompts_;
};

}  // namespace strata::server

#endif  // STRATA_SERVER_CHAT_SERVICE_H_
