// The status page on the metrics port, for a person with a browser and no Grafana: `/`
// serves server/status_page.html (linked into the binary), which polls `/status.json` and
// draws the tiers, sessions, cache, turns, SSD state, build and, as small live plots, the
// hit rate, TTFT and tokens per second of the last minutes.
//
// /status.json is {"samples": {...}, "history": {...}}: "samples" is the registry's
// exposition read back by ParsePrometheusText (key -> value: the numbers a scrape of
// /metrics gets at that moment), "history" the MetricsHistory of the names below
// (MetricsHistory::ToJson). /metrics itself is unchanged.
#ifndef STRATA_SERVER_STATUS_PAGE_H_
#define STRATA_SERVER_STATUS_PAGE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "base/metrics.h"
#include "base/metrics_exposer.h"
#include "base/metrics_history.h"

namespace strata::server {

// A history of what the page plots (cache lookups and hits, TTFT, generated tokens),
// sampled every `interval`, 180 points.
metrics::MetricsHistoryOptions StatusHistoryOptions(absl::Duration interval);

// The page's HTML: server/status_page.html as it was at build time.
std::string_view StatusPageHtml();

// The body of /status.json, from `registry` now and `history`. Thread-safe.
std::string StatusJson(const metrics::Registry& registry, const metrics::MetricsHistory& history);

// `/` and `/status.json`, for MetricsExposer::Start. `registry` and `history` must outlive
// the exposer that serves them.
std::vector<metrics::HttpPage> StatusPages(const metrics::Registry* registry, const metrics::MetricsHistory* history);

}  // namespace strata::server

#endif  // STRATA_SERVER_STATUS_PAGE_H_
