// ServerProcess: a real `strata serve` child process on free loopback ports, for
// end-to-end tests.
#ifndef STRATA_TESTS_E2E_SERVER_PROCESS_H_
#define STRATA_TESTS_E2E_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::testing {

class ServerProcess {
 public:
  // Starts `strata serve --port 0 --metrics_port 0 <extra_flags>` and waits (up to 60 s)
  // until it listens. The binary is STRATA_BINARY (set by the build).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::vector<std::string>& extra_flags);
  // Sends SIGTERM and waits for the process.
  ~ServerProcess();

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  // SIGTERM and wait; returns the exit status as waitpid reports it.
  int Stop();

 private:
  ServerProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string dir_;
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_E2E_SERVER_PROCESS_H_
