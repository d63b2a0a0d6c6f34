#include "server/status_page.h"

#include <cstddef>

#include "base/log.h"
#include "base/prometheus_text.h"
#include "nlohmann/json.hpp"

// The page's bytes, placed in .rodata by the assembler (as model/builtin does).
// STRATA_STATUS_PAGE is its path; STRATA_STATUS_PAGE_SHA256 (set by CMake) is only here
// so that an edited page changes this file's compile line: ccache hashes the preprocessed
// source, which .incbin's bytes are not part of.
#ifndef STRATA_STATUS_PAGE
#error "STRATA_STATUS_PAGE must name server/status_page.html (set by server/CMakeLists.txt)"
#endif
static_assert(sizeof(STRATA_STATUS_PAGE_SHA256) > 1, "STRATA_STATUS_PAGE_SHA256 must be set by CMake");

asm(".pushsection .rodata\n"
    "strata_status_page_begin:\n"
    ".incbin \"" STRATA_STATUS_PAGE
    "\"\n"
    "strata_status_page_end:\n"
    ".popsection\n");

extern "C" {
extern const char strata_status_page_begin[];
extern const char strata_status_page_end[];
}

namespace strata::server {

metrics::MetricsHistoryOptions StatusHistoryOptions(absl::Duration interval) {
  metrics::MetricsHistoryOptions o;
  o.interval = interval;
  o.max_points = 180;
  o.names = {"strata_cache_lookups_total", "strata_cache_hits_total", "strata_ttft_seconds",
             "strata_generated_tokens_total"};
  return o;
}

std::string_view StatusPageHtml() {
  return std::string_view(strata_status_page_begin,
                          static_cast<size_t>(strata_status_page_end - strata_status_page_begin));
}

std::string StatusJson(const metrics::Registry& registry, const metrics::MetricsHistory& history) {
  nlohmann::json samples = nlohmann::json::object();
  if (auto parsed = metrics::ParsePrometheusText(registry.Serialize()); parsed.ok()) {
    samples = *parsed;  // an infinite or NaN value (none is exported today) would be null
  } else {
    LOG(ERROR) << "status page: the exposition does not parse: " << parsed.status().message();
  }
  return "{\"samples\":" + samples.dump() + ",\"history\":" + history.ToJson() + "}";
}

std::vector<metrics::HttpPage> StatusPages(const metrics::Registry* registry, const metrics::MetricsHistory* history) {
  std::vector<metrics::HttpPage> pages;
  pages.push_back({"/", "text/html; charset=utf-8", [] { return std::string(StatusPageHtml()); }});
  pages.push_back(
      {"/status.json", "application/json", [registry, history] { return StatusJson(*registry, *history); }});
  return pages;
}

}  // namespace strata::server
