// The process's own metrics, read from /proc/self at every scrape, under the names
// Prometheus client libraries use: process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_start_time_seconds.
#ifndef STRATA_BASE_PROCESS_METRICS_H_
#define STRATA_BASE_PROCESS_METRICS_H_

#include "base/metrics.h"

namespace strata::metrics {

void ExportProcessMetrics(Registry& registry);

}  // namespace strata::metrics

#endif  // STRATA_BASE_PROCESS_METRICS_H_
