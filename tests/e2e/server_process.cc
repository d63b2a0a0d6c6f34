#include "tests/e2e/server_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace strata::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& extra_flags) {
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  char tmpl[] = "/tmp/strata-e2e-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  p->dir_ = tmpl;
  const std::string port_file = p->dir_ + "/ports";
  std::vector<std::string> args = {STRATA_BINARY, "serve", "--port=0", "--metrics_port=0",
                                   "--port_file=" + port_file};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::perror("execv strata");
    _exit(127);
  }
  p->pid_ = pid;
  for (int i = 0; i < 600; ++i) {
    std::ifstream f(port_file);
    if (f >> p->port_ >> p->metrics_port_) return p;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->pid_ = -1;
      return absl::InternalError(absl::StrCat("strata serve exited early, status ", status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError("strata serve did not start listening within 60 s");
}

int ServerProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

ServerProcess::~ServerProcess() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace strata::testing
