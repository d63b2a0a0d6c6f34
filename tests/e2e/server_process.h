// ServerProcess: a real `strata serve` child process on free loopback ports, for
// end-to-end tests: server::ServeProcess with the binary the build made (STRATA_BINARY).
#ifndef STRATA_TESTS_E2E_SERVER_PROCESS_H_
#define STRATA_TESTS_E2E_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/serve_process.h"

namespace strata::testing {

class ServerProcess {
 public:
  // Starts `strata serve --port 0 --metrics_port 0 --model=random:builtin <extra_flags>`
  // and waits (up to 60 s) until it listens (a --model in extra_flags wins). Errors as
  // server::ServeProcess::Start.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::vector<std::string>& extra_flags);

  std::string target() const { return process_->target(); }
  int port() const { return process_->port(); }
  int metrics_port() const { return process_->metrics_port(); }
  pid_t pid() const { return process_->pid(); }
  std::string log_path() const { return process_->log_path(); }
  // SIGTERM and wait; returns the exit status as waitpid reports it (-1 if stopped).
  int Stop() { return process_->Stop(); }

 private:
  explicit ServerProcess(std::unique_ptr<server::ServeProcess> process) : process_(std::move(process)) {}
  std::unique_ptr<server::ServeProcess> process_;
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_E2E_SERVER_PROCESS_H_
