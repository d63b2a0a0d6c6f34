// SystemPromptService: a tenant's shared system prompts (register, drop, list).
#ifndef STRATA_SERVER_SYSTEM_PROMPT_SERVICE_H_
#define STRATA_SERVER_SYSTEM_PROMPT_SERVICE_H_

#include "proto/request_traits.h"  // before the generated service: strict request parsing

#include <map>
#include <string>
#include <vector>

#include "server/auth.h"
#include "engine/engine.h"
#include "server/system_prompts.h"
#include "strata/v1/system_prompts.grpc.pb.h"
#include "text/tokenizer.h"

namespace strata::server {

class SystemPromptServiceImpl final : public v1::SystemPromptService::Service {
 public:
  SystemPromptServiceImpl(engine::Engine* engine, const text::Tokenizer* tokenizer, SystemPromptRegistry* registry,
                          const ApiKeys* api_keys)
      : engine_(engine), tokenizer_(tokenizer), registry_(registry), api_keys_(api_keys) {}

  grpc::Status RegisterSystemPrompt(grpc::ServerContext* context, const v1::RegisterSystemPromptRequest* request,
                                    v1::RegisterSystemPromptResponse* response) override;
  grpc::Status DropSystemPrompt(grpc::ServerContext* context, const v1::DropSystemPromptRequest* request,
                                v1::DropSystemPromptResponse* response) override;
  grpc::Status ListSystemPrompts(grpc::ServerContext* context, const v1::ListSystemPromptsRequest* request,
                                 v1::ListSystemPromptsResponse* response) override;

 private:
  engine::Engine* engine_;
  const text::Tokenizer* tokenizer_;
  SystemPromptRegistry* registry_;
  const ApiKeys* api_keys_;
};

}  // namespace strata::server

#endif  // STRATA_SERVER_SYSTEM_PROMPT_SERVICE_H_
