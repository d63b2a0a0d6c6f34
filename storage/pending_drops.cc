#include "storage/pending_drops.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"

namespace strata::storage {

absl::Status PendingDrops::Add(const SessionKey& key, uint64_t when_us) {
  return WriteFileDurably(
      path_, absl::StrCat(when_us, " ", key.tenant.size(), " ", key.session_id.size(), " ", key.tenant, key.session_id, "\n"),
      /*append=*/true);
}

absl::flat_hash_map<std::string, uint64_t> PendingDrops::Load() const {
  absl::flat_hash_map<std::string, uint64_t> drops;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return drops;
  std::stringstream whole;
  whole << in.rdbuf();
  const std::string text = whole.str();
  size_t at = 0;
  while (at < text.size()) {
    // "<when> <tenant length> <session length> <tenant><session>\n"
    std::istringstream head(text.substr(at, 64));
    uint64_t when = 0;
    size_t tenant_len = 0, session_len = 0;
    if (!(head >> when >> tenant_len >> session_len)) break;
    const auto header = head.tellg();
    if (header < 0) break;
    const size_t start = at + static_cast<size_t>(header) + 1;  // past the space
    const size_t end = start + tenant_len + session_len;
    if (end >= text.size() || text[end] != '\n') break;  // cut short
    const SessionKey key{text.substr(start, tenant_len), text.substr(start + tenant_len, session_len)};
    uint64_t& latest = drops[SessionMapKey(key)];
    latest = std::max(latest, when);
    at = end + 1;
  }
  return drops;
}

void PendingDrops::Clear() {
  std::error_code ec;
  if (std::filesystem::remove(path_, ec)) SyncDirectoryOf(path_);
}

}  // namespace strata::storage
