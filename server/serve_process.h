// ServeProcess: a `strata serve` child process on free loopback ports, started and
// stopped by its owner: `strata bench` without --target, and the end-to-end tests.
#ifndef STRATA_SERVER_SERVE_PROCESS_H_
#define STRATA_SERVER_SERVE_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata::server {

class ServeProcess {
 public:
  // Runs `<binary> serve --port=0 --metrics_port=0 --port_file=<tmp> <flags...>` (later
  // flags win) with its output in a log file, and waits until it listens. The child gets
  // SIGTERM if this process dies. Internal, with the tail of the server's log, when it
  // exits before listening; DeadlineExceeded (the child killed) after `timeout`.
  static absl::StatusOr<std::unique_ptr<ServeProcess>> Start(const std::string& binary,
                                                             const std::vector<std::string>& flags,
                                                             absl::Duration timeout = absl::Minutes(5));
  // Stop(), then removes the temporary directory.
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // The server's stdout and stderr.
  std::string log_path() const { return dir_ + "/serve.log"; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  // Empty when the server was started with --metrics_port=-1.
  std::string metrics_target() const {
    return metrics_port_ > 0 ? "127.0.0.1:" + std::to_string(metrics_port_) : "";
  }
  // SIGTERM, then SIGKILL after 30 s; returns the wait status (-1 if already stopped).
  int Stop();

 private:
  ServeProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string dir_;
};

}  // namespace strata::server

#endif  // STRATA_SERVER_SERVE_PROCESS_H_
