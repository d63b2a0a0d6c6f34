// MetricsExposer: serves a Registry's exposition (Registry::Serialize) at GET /metrics
// over HTTP (civetweb), and any other pages its owner adds (the server's status page).
// Not prometheus-cpp-pull's Exposer, which serves collectables and nothing else
// (docs/DESIGN.md).
#ifndef STRATA_BASE_METRICS_EXPOSER_H_
#define STRATA_BASE_METRICS_EXPOSER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/metrics.h"

struct mg_context;

namespace strata::metrics {

// A page served beside /metrics at exactly `path` ("/", "/status.json"), GET and HEAD.
// `body` runs on a civetweb thread for every GET (two may run at once), so it must be
// thread-safe; it must not block for long.
struct HttpPage {
  std::string path;
  std::string content_type;  // e.g. "text/html; charset=utf-8"
  std::function<std::string()> body;
};

class MetricsExposer {
 public:
  // Listens on `address` ("127.0.0.1:9464"; port 0 picks a free port) and serves
  // `registry` at /metrics and `pages` at their paths; every other path is 404. A page
  // at /metrics is ignored (that path is always the registry's). Unavailable, with the
  // address, when it cannot listen. `registry`, and whatever the pages' bodies use, must
  // outlive the exposer.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(const std::string& address, const Registry* registry,
                                                               std::vector<HttpPage> pages = {});
  // Stops serving; blocks until in-flight requests finish.
  ~MetricsExposer();

  int port() const { return port_; }

 private:
  MetricsExposer(mg_context* ctx, int port, std::vector<std::unique_ptr<HttpPage>> pages)
      : ctx_(ctx), port_(port), pages_(std::move(pages)) {}
  mg_context* ctx_;
  int port_;
  // The handlers' data: stable addresses, kept until mg_stop has returned.
  std::vector<std::unique_ptr<HttpPage>> pages_;
};

}  // namespace strata::metrics

#endif  // STRATA_BASE_METRICS_EXPOSER_H_
