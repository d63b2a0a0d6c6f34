#include "engine/system_prompt_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "xxhash.h"

namespace strata::engine {
namespace {

constexpr std::string_view kIdPrefix = "sp-";
constexpr std::string_view kSessionPrefix = "\x01system-prompt/";

}  // namespace

std::string SystemPromptId(absl::Span<const int32_t> tokens) {
  const XXH128_hash_t h = XXH3_128bits(tokens.data(), tokens.size() * sizeof(int32_t));
  return absl::StrFormat("%s%016x%016x", kIdPrefix, h.high64, h.low64);
}

bool IsSystemPromptId(std::string_view id) {
  if (id.size() != kIdPrefix.size() + 32 || id.substr(0, kIdPrefix.size()) != kIdPrefix) return false;
  for (char c : id.substr(kIdPrefix.size())) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) || absl::ascii_isupper(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

storage::SessionKey SystemPromptKey(const std::string& tenant, const std::string& id) {
  return storage::SessionKey{tenant, std::string(kSessionPrefix) + id};
}

std::string_view SystemPromptSessionPrefix() { return kSessionPrefix; }

std::optional<std::string> SystemPromptIdOfSession(std::string_view session_id) {
  if (session_id.substr(0, kSessionPrefix.size()) != kSessionPrefix) return std::nullopt;
  return std::string(session_id.substr(kSessionPrefix.size()));
}

}  // namespace strata::engine
