// ParsePrometheusText: reads samples out of the Prometheus text format, for tests and
// tools that check /metrics.
#ifndef STRATA_BASE_PROMETHEUS_TEXT_H_
#define STRATA_BASE_PROMETHEUS_TEXT_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace strata::metrics {

// Maps each sample to its value. The key is the metric name followed, if it has labels,
// by `{k="v",...}` with the labels sorted by name and values escaped as in the format,
// e.g. `strata_cache_hits_total{tier="host"}`. Comment lines are skipped.
// InvalidArgument naming the line when a line does not parse.
absl::StatusOr<std::map<std::string, double>> ParsePrometheusText(std::string_view text);

}  // namespace strata::metrics

#endif  // STRATA_BASE_PROMETHEUS_TEXT_H_
