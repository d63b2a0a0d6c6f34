#include "server/system_prompt_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/system_prompt_names.h"
#include "server/auth.h"
#include "server/chat_service.h"
#include "server/status_map.h"

namespace strata::server {

absl::StatusOr<ResolvedPrompt> ResolveSystemPrompt(const SystemPromptRegistry& registry, const text::Tokenizer& tokenizer,
                                                   const std::string& tenant, const std::string& id) {
  if (!engine::IsSystemPromptId(id)) return absl::NotFoundError(absl::StrCat("no system prompt '", id, "'"));
  ResolvedPrompt out;
  if (std::optional<SystemPromptRegistry::Registration> r = registry.Find(tenant, id); r.has_value()) {
    out.messages = std::move(r->messages);
    if (out.messages.empty()) {
      out.tokens = std::move(r->token_ids);
    } else {
      auto tokens = RenderSystemPart(tokenizer, out.messages);
      if (!tokens.ok()) return tokens.status();
      out.tokens = *std::move(tokens);
    }
    return out;
  }
  // Only registered prompts have names clients use; one recognised in conversations is
  // shared without being named.
  return absl::NotFoundError(absl::StrCat("no system prompt '", id, "' is registered"));
}

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
  std::vector<int32_t> tokens;
  if (request->token_ids_size() > 0) {
    registration.token_ids.assign(request->token_ids().begin(), request->token_ids().end());
    tokens = registration.token_ids;
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
    tokens = *std::move(rendered);
  }
  const size_t n = tokens.size();
  auto id = engine_->RegisterSystemPrompt(*tenant, std::move(tokens));
  if (!id.ok()) return ToGrpcStatus(id.status());
  if (absl::Status s = registry_->Add(*tenant, *id, std::move(registration)); !s.ok()) return ToGrpcStatus(s);
  response->set_id(*id);
  response->set_tokens(static_cast<uint32_t>(n));
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
  absl::Status dropped = engine_->DropSystemPrompt(*tenant, id);
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
      // space): listed with its tokens as the chat path would use them.
      auto resolved = ResolveSystemPrompt(*registry_, *tokenizer_, *tenant, id);
      held.push_back({.id = id, .tokens = resolved.ok() ? static_cast<int64_t>(resolved->tokens.size()) : 0});
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
