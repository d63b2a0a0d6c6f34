#include "storage/tenant_quota.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata::storage {

absl::StatusOr<int64_t> ParseByteCount(absl::string_view text) {
  static constexpr std::pair<absl::string_view, int> kSuffixes[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  int shift = 0;
  for (const auto& [suffix, bits] : kSuffixes) {
    if (absl::ConsumeSuffix(&digits, suffix)) {
      shift = bits;
      break;
    }
  }
  int64_t n = 0;
  const bool all_digits = !digits.empty() && digits.find_first_not_of("0123456789") == absl::string_view::npos;
  if (!all_digits || !absl::SimpleAtoi(digits, &n) || n > (std::numeric_limits<int64_t>::max() >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte count (digits, optionally followed by KiB, MiB, GiB or TiB)"));
  }
  return n << shift;
}

absl::StatusOr<std::map<std::string, TenantQuota>> ParseTenantQuotas(absl::string_view text,
                                                                     const TenantQuota& defaults) {
  std::map<std::string, TenantQuota> out;
  int position = 0;
  for (absl::string_view entry : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    ++position;
    entry = absl::StripAsciiWhitespace(entry);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("tenant quota entry ", position, " ('", entry, "'): ", why));
    };
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos || colon == 0) return bad("expected tenant:host=BYTES,ssd=BYTES");
    const std::string tenant(absl::StripAsciiWhitespace(entry.substr(0, colon)));
    if (tenant.empty()) return bad("the tenant is empty");
    TenantQuota quota = defaults;
    for (absl::string_view field : absl::StrSplit(entry.substr(colon + 1), ',', absl::SkipWhitespace())) {
      std::vector<absl::string_view> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
      const absl::string_view name = kv.size() == 2 ? absl::StripAsciiWhitespace(kv[0]) : absl::string_view();
      if (name != "host" && name != "ssd") return bad("fields are host=BYTES and ssd=BYTES");
      absl::StatusOr<int64_t> bytes = ParseByteCount(kv[1]);
      if (!bytes.ok()) return bad(bytes.status().message());
      (name == "host" ? quota.host_bytes : quota.ssd_bytes) = *bytes;
    }
    if (!out.emplace(tenant, quota).second) return bad("the tenant has an entry already");
  }
  return out;
}

}  // namespace strata::storage
