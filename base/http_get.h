// HttpGet: a small blocking HTTP/1.0 GET over a TCP socket, for tests and `strata chat`.
#ifndef STRATA_BASE_HTTP_GET_H_
#define STRATA_BASE_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace strata::metrics {

// Returns the body of a 200 response. Unavailable when the connection fails; Internal
// for any other status code (named in the message). Times out after 10 s.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path);

}  // namespace strata::metrics

#endif  // STRATA_BASE_HTTP_GET_H_
