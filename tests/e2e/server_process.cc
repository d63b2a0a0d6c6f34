#include "tests/e2e/server_process.h"

#include "absl/time/time.h"

namespace strata::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(const std::vector<std::string>& extra_flags) {
  // The random built-in model unless the test names one (later flags win): half the
  // layers of the trained default, so tests run faster, and answers that run to
  // max_new_tokens far more often than a trained model's.
  std::vector<std::string> flags = {"--model=random:builtin"};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  auto process = server::ServeProcess::Start(STRATA_BINARY, flags, absl::Seconds(60));
  if (!process.ok()) return process.status();
  return std::unique_ptr<ServerProcess>(new ServerProcess(*std::move(process)));
}

}  // namespace strata::testing
