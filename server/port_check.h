// Whether a TCP port can be listened on, checked before anything slow or heavy starts
// (model loading, locking host memory), so a port in use is one clear message at once.
#ifndef STRATA_SERVER_PORT_CHECK_H_
#define STRATA_SERVER_PORT_CHECK_H_

#include <string>

#include "absl/status/status.h"

namespace strata::server {

// `address` is "host:port" (IPv4 or a name; port 0 always passes). Unavailable naming
// the port when something listens there already; InvalidArgument for a malformed address.
absl::Status CheckPortFree(const std::string& address);

}  // namespace strata::server

#endif  // STRATA_SERVER_PORT_CHECK_H_
