#include "server/system_prompt_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/system_prompt_names.h"
#include "server/auth.h"
#include "server/chat_service.h"
#include "server/status_map.h"

namespace strata::server {

grpc::Status SystemPromptServiceImpl::RegisterSystemPrompt(grpc::ServerContext* context,
                                                           const v1::RegisterSystemPromptRequest* request,
                                                           v1::RegisterSystemPromptResponse* response) {
  auto tenant = TenantOf(*context, *api_keys_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  const int forms = !request->text().empty() + (request->messages_size() > 0) + (request->token_ids_size() > 0);
  if (forms != 1) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "give exactly one of text, messages or token_ids for the system prompt");
  }
  SystemPromptRegistry::Registration registration;
  if (request->token_ids_size() > 0) {
    registration.tokens.assign(request->token_ids().begin(), request->token_ids().end());
  } else {
    if (!request->text().empty()) registration.messages.push_back({"system", request->text()});
    if (request->messages_size() > kMaxMessages) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("at most ", kMaxMessages, " messages"));
    }
    for (const v1::Message& m : request->messages()) {
      if (m.role() != "system") {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("a system prompt holds system messages only; got a '", m.role(), "' message"));
      }
      registration.messages.push_back({m.role(), m.content()});
    }
    auto rendered = RenderSystemPart(*tokenizer_, registration.messages);
    if (!rendered.ok()) return ToGrpcStatus(rendered.status());
    registration.tokens = *std::move(rendered);
  }
  const size_t n = registration.tokens.size();
  auto id = engine_->RegisterSystemPrompt(*tenant, registration.tokens);
  if (!id.ok()) return ToGrpcStatus(id.status());
  if (absl::Status s = registry_->Add(*tenant, *id, std::move(registration)); !s.ok()) return ToGrpcStatus(s);
  response->set_id(*id);
  response->set_tokens(static_cast<uint32_t>(n));
  response->set_shared(engine_->SharesSystemPrompt(static_cast<int64_t>(n)));
  return grpc::Status::OK;
}

grpc::Status SystemPromptServiceImpl::DropSystemPrompt(grpc::ServerContext* context,
                                                       const v1::DropSystemPromptRequest* request,
                                                       v1::DropSystemPromptResponse*) {
  auto tenant = TenantOf(*context, *api_keys_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  const std::string& id = request->id();
  if (!engine::IsSystemPromptId(id)) {
    return ToGrpcStatus(absl::NotFoundError(absl::StrCat("no system prompt '", id, "'")));
  }
  auto registered = registry_->Remove(*tenant, id);
  if (!registered.ok()) return ToGrpcStatus(registered.status());
  absl::Status dropped = engine_->DropSystemPrompt(*tenant, id, /*known=*/*registered);
  if (*registered && absl::IsNotFound(dropped)) return grpc::Status::OK;  // registered, not yet held
  return ToGrpcStatus(dropped);
}

grpc::Status SystemPromptServiceImpl::ListSystemPrompts(grpc::ServerContext* context,
                                                        const v1::ListSystemPromptsRequest*,
                                                        v1::ListSystemPromptsResponse* response) {
  auto tenant = TenantOf(*context, *api_keys_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  std::vector<engine::Engine::SystemPromptInfo> held = engine_->ListSystemPrompts(*tenant);
  std::vector<std::string> registered = registry_->Ids(*tenant);
  for (const std::string& id : registered) {
    if (std::none_of(held.begin(), held.end(), [&](const auto& p) { return p.id == id; })) {
      // Registered and not held now (its KV was evicted or dropped with the store's
      // space): listed with its tokens.
      auto registration = registry_->Find(*tenant, id);
      held.push_back({.id = id, .tokens = registration.ok() ? static_cast<int64_t>(registration->tokens.size()) : 0});
    }
  }
  std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  for (const engine::Engine::SystemPromptInfo& p : held) {
    v1::SystemPromptInfo* out = response->add_prompts();
    out->set_id(p.id);
    out->set_tokens(static_cast<uint32_t>(p.tokens));
    out->set_registered(std::find(registered.begin(), registered.end(), p.id) != registered.end());
    out->set_resident(p.resident);
    out->set_running_turns(static_cast<uint32_t>(p.running_turns));
    out->set_stored(p.stored);
    out->set_persisted(p.persisted);
    out->set_stored_bytes(static_cast<uint64_t>(p.stored_bytes));
  }
  return grpc::Status::OK;
}

}  // namespace strata::server
