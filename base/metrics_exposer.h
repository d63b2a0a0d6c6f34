// MetricsExposer: serves a Registry at GET /metrics over HTTP (civetweb).
#ifndef STRATA_BASE_METRICS_EXPOSER_H_
#define STRATA_BASE_METRICS_EXPOSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/metrics.h"

struct mg_context;

namespace strata::metrics {

class MetricsExposer {
 public:
  // Listens on `address` ("127.0.0.1:9464"; port 0 picks a free port). Unavailable, with
  // the address, when it cannot listen. `registry` must outlive the exposer.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(const std::string& address,
                                                               const Registry* registry);
  // Stops serving; blocks until in-flight scrapes finish.
  ~MetricsExposer();

  int port() const { return port_; }

 private:
  MetricsExposer(mg_context* ctx, int port) : ctx_(ctx), port_(port) {}
  mg_context* ctx_;
  int port_;
};

}  // namespace strata::metrics

#endif  // STRATA_BASE_METRICS_EXPOSER_H_
