#include "server/system_prompts.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "nlohmann/json.hpp"

namespace strata::server {

namespace {

// The longest common prefix of `system` followed by `a` and by `b`, rendered.
absl::StatusOr<std::vector<int32_t>> CommonRender(const text::Tokenizer& tokenizer,
                                                  absl::Span<const text::ChatMessage> system,
                                                  std::initializer_list<text::ChatMessage> a,
                                                  std::initializer_list<text::ChatMessage> b) {
  std::vector<text::ChatMessage> ma(system.begin(), system.end()), mb = ma;
  ma.insert(ma.end(), a);
  mb.insert(mb.end(), b);
  auto ra = tokenizer.RenderChat(ma);
  if (!ra.ok()) return ra.status();
  auto rb = tokenizer.RenderChat(mb);
  if (!rb.ok()) return rb.status();
  const auto mismatch = std::mismatch(ra->begin(), ra->end(), rb->begin(), rb->end());
  return std::vector<int32_t>(ra->begin(), mismatch.first);
}

// The tokens both a user's and an assistant's first message follow.
absl::StatusOr<std::vector<int32_t>> BeforeEitherFirstMessage(const text::Tokenizer& tokenizer,
                                                              absl::Span<const text::ChatMessage> system) {
  auto user = CommonRender(tokenizer, system, {{"user", "a"}}, {{"user", "b"}});
  if (!user.ok()) return user.status();
  auto assistant =
      CommonRender(tokenizer, system, {{"assistant", "a"}, {"user", "q"}}, {{"assistant", "b"}, {"user", "q"}});
  if (!assistant.ok()) return assistant.status();
  const auto mismatch = std::mismatch(user->begin(), user->end(), assistant->begin(), assistant->end());
  return std::vector<int32_t>(user->begin(), mismatch.first);
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> RenderSystemPart(const text::Tokenizer& tokenizer,
                                                      absl::Span<const text::ChatMessage> system) {
  auto part = CommonRender(tokenizer, system, {{"user", "a"}}, {{"user", "b"}});
  if (!part.ok()) return part.status();
  if (part->empty()) return absl::InvalidArgumentError("the chat template renders no system part");
  return part;
}

absl::StatusOr<std::vector<int32_t>> RenderSystemPartBeforeAssistant(const text::Tokenizer& tokenizer,
                                                                     absl::Span<const text::ChatMessage> system) {
  if (system.empty()) return absl::InvalidArgumentError("no system messages");
  auto part = BeforeEitherFirstMessage(tokenizer, system);
  if (!part.ok()) return part.status();
  // The part must hold the whole system text: the last system message changed at its end
  // changes it. (A template that renders the system text elsewhere, or not at all, when the
  // assistant speaks first leaves the two the same, before the text.)
  std::vector<text::ChatMessage> changed(system.begin(), system.end());
  changed.back().content += "\n.";
  auto other = BeforeEitherFirstMessage(tokenizer, changed);
  if (!other.ok()) return other.status();
  if (part->empty() || *part == *other) {
    return absl::InvalidArgumentError(
        "the chat template does not render the system text before an assistant's first message");
  }
  return part;
}

int64_t SharedPrefixTokens(absl::Span<const int32_t> part, absl::Span<const int32_t> prompt) {
  if (part.empty() || part.size() >= prompt.size()) return 0;
  return std::equal(part.begin(), part.end(), prompt.begin()) ? static_cast<int64_t>(part.size()) : 0;
}

int64_t SystemPartCache::Recognise(absl::Span<const text::ChatMessage> messages, absl::Span<const int32_t> prompt) {
  size_t k = 0;
  while (k < messages.size() && messages[k].role == "system") ++k;
  if (k == 0 || k == messages.size()) return 0;
  // A conversation the assistant opens has its own part (the user's header is not in it).
  const bool assistant_first = messages[k].role == "assistant";
  std::string key(assistant_first ? "a" : "u");
  for (size_t i = 0; i < k; ++i) absl::StrAppend(&key, std::string(1, '\0'), messages[i].role, std::string(1, '\0'),
                                                  messages[i].content);
  std::shared_ptr<const std::vector<int32_t>> part;
  {
    MutexLock lock(&mu_);
    if (auto it = parts_.find(key); it != parts_.end()) part = it->second;
  }
  if (part == nullptr) {
    auto rendered = assistant_first ? RenderSystemPartBeforeAssistant(*tokenizer_, messages.subspan(0, k))
                                    : RenderSystemPart(*tokenizer_, messages.subspan(0, k));
    part = std::make_shared<const std::vector<int32_t>>(rendered.ok() ? *std::move(rendered)
                                                                      : std::vector<int32_t>());
    MutexLock lock(&mu_);
    if (parts_.size() >= capacity_) parts_.clear();
    parts_.emplace(std::move(key), part);
  }
  return SharedPrefixTokens(*part, prompt);
}

namespace {

nlohmann::json ToJson(const std::string& tenant, const std::string& id,
                      const SystemPromptRegistry::Registration& r) {
  nlohmann::json j = {{"tenant", tenant}, {"id", id}};
  j["tokens"] = r.tokens;
  if (!r.messages.empty()) {
    j["messages"] = nlohmann::json::array();
    for (const text::ChatMessage& m : r.messages) j["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  return j;
}

absl::Status SyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fsync ", path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SystemPromptRegistry>> SystemPromptRegistry::Open(std::string file,
                                                                                uint64_t model_fingerprint) {
  std::unique_ptr<SystemPromptRegistry> registry(new SystemPromptRegistry(std::move(file), model_fingerprint));
  if (registry->file_.empty() || !std::filesystem::exists(registry->file_)) return registry;
  std::ifstream in(registry->file_);
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json all = nlohmann::json::parse(text.str());
    if (all.contains("model_fingerprint") && model_fingerprint != 0 &&
        all.at("model_fingerprint").get<std::string>() != absl::StrCat(absl::Hex(model_fingerprint))) {
      LOG(WARNING) << "the system prompt registrations in " << registry->file_ << " are for model "
                   << all.at("model_fingerprint").get<std::string>() << "; this server runs "
                   << absl::StrCat(absl::Hex(model_fingerprint)) << ": they are not taken (register the prompts again)";
      return registry;
    }
    MutexLock lock(&registry->mu_);
    for (const nlohmann::json& j : all.at("prompts")) {
      Registration r;
      r.tokens = j.at("tokens").get<std::vector<int32_t>>();
      if (j.contains("messages")) {
        for (const nlohmann::json& m : j.at("messages")) {
          r.messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
        }
      }
      registry->registrations_[{j.at("tenant").get<std::string>(), j.at("id").get<std::string>()}] = std::move(r);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the system prompt registrations in ", registry->file_, " do not parse: ", e.what()));
  }
  return registry;
}

absl::Status SystemPromptRegistry::WriteLocked() const {
  if (file_.empty()) return absl::OkStatus();
  nlohmann::json all = {{"prompts", nlohmann::json::array()}};
  if (model_fingerprint_ != 0) all["model_fingerprint"] = absl::StrCat(absl::Hex(model_fingerprint_));
  for (const auto& [key, r] : registrations_) all["prompts"].push_back(ToJson(key.first, key.second, r));
  const std::string tmp = file_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << all.dump(1) << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (absl::Status s = SyncPath(tmp, O_RDONLY); !s.ok()) return s;
  if (::rename(tmp.c_str(), file_.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("rename ", tmp, ": ", std::strerror(errno)));
  }
  const std::string dir = std::filesystem::path(file_).parent_path().string();
  return SyncPath(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
}

absl::Status SystemPromptRegistry::Add(const std::string& tenant, const std::string& id, Registration registration) {
  MutexLock lock(&mu_);
  auto key = std::make_pair(tenant, id);
  auto old = registrations_.find(key);
  std::optional<Registration> previous;
  if (old != registrations_.end()) previous = old->second;
  // The same prompt (its id is its tokens) registered again by its token IDs keeps the
  // messages it was registered with: chats that send messages with its id go on working.
  if (previous.has_value() && registration.messages.empty() && registration.tokens == previous->tokens) {
    registration.messages = previous->messages;
  }
  registrations_[key] = std::move(registration);
  absl::Status s = WriteLocked();
  if (!s.ok()) {
    // Not acknowledged: as it was.
    if (previous.has_value()) {
      registrations_[key] = *std::move(previous);
    } else {
      registrations_.erase(key);
    }
  }
  return s;
}

absl::StatusOr<bool> SystemPromptRegistry::Remove(const std::string& tenant, const std::string& id) {
  MutexLock lock(&mu_);
  auto it = registrations_.find({tenant, id});
  if (it == registrations_.end()) return false;
  Registration removed = std::move(it->second);
  registrations_.erase(it);
  if (absl::Status s = WriteLocked(); !s.ok()) {
    registrations_[{tenant, id}] = std::move(removed);
    return s;
  }
  return true;
}

absl::StatusOr<SystemPromptRegistry::Registration> SystemPromptRegistry::Find(const std::string& tenant,
                                                                              const std::string& id) const {
  MutexLock lock(&mu_);
  auto it = registrations_.find({tenant, id});
  if (it == registrations_.end()) return absl::NotFoundError(absl::StrCat("no system prompt '", id, "' is registered"));
  return it->second;
}

std::vector<std::string> SystemPromptRegistry::Ids(const std::string& tenant) const {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [key, r] : registrations_) {
    if (key.first == tenant) out.push_back(key.second);
  }
  return out;
}

}  // namespace strata::server
