#include "tests/e2e/server_process.h"

#include "absl/time/time.h"

namespace strata::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(const std::vector<std::string>& extra_flags) {
  auto process = server::ServeProcess::Start(STRATA_BINARY, extra_flags, absl::Seconds(60));
  if (!process.ok()) return process.status();
  return std::unique_ptr<ServerProcess>(new ServerProcess(*std::move(process)));
}

}  // namespace strata::testing
