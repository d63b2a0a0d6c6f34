// The one place where absl::Status becomes grpc::Status.
#ifndef STRATA_SERVER_STATUS_MAP_H_
#define STRATA_SERVER_STATUS_MAP_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace strata::server {

// Same code (the two enums share values), same message.
grpc::Status ToGrpcStatus(const absl::Status& status);
// Lower-case code name as Prometheus labels carry it ("ok", "invalid_argument", ...).
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace strata::server

#endif  // STRATA_SERVER_STATUS_MAP_H_
