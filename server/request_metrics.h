// strata_requests_total{method, code}: every gRPC call the server answers, by method and
// final status — counted where the status is sent (a server interceptor), so calls
// refused before a handler runs (a request that does not parse, an unknown method) are
// counted as well as the handlers' own answers.
#ifndef STRATA_SERVER_REQUEST_METRICS_H_
#define STRATA_SERVER_REQUEST_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "base/metrics.h"

namespace strata::server {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RequestMetricsInterceptor(
    metrics::Registry& registry);

}  // namespace strata::server

#endif  // STRATA_SERVER_REQUEST_METRICS_H_
