#include "server/serve_process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace strata::server {
namespace {

std::string LogTail(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string log = ss.str();
  return log.size() > 2000 ? log.substr(log.size() - 2000) : log;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServeProcess>> ServeProcess::Start(const std::string& binary,
                                                                  const std::vector<std::string>& flags,
                                                                  absl::Duration timeout) {
  std::unique_ptr<ServeProcess> p(new ServeProcess());
  char tmpl[] = "/tmp/strata-serve-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  p->dir_ = tmpl;
  const std::string port_file = p->dir_ + "/ports";
  const std::string log = p->dir_ + "/serve.log";
  std::vector<std::string> args = {binary, "serve", "--port=0", "--metrics_port=0", "--port_file=" + port_file};
  args.insert(args.end(), flags.begin(), flags.end());
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // The server must not outlive the bench (a Ctrl-C of the bench stops it too).
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::perror("execv strata");
    _exit(127);
  }
  p->pid_ = pid;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream f(port_file);
    if (f >> p->port_ >> p->metrics_port_) return p;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->pid_ = -1;
      return absl::InternalError(absl::StrCat("strata serve exited before listening (wait status ", status,
                                              "); its log ends:\n", LogTail(log)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  return absl::DeadlineExceededError(absl::StrCat("strata serve did not listen within ",
                                                  absl::FormatDuration(timeout), "; its log ends:\n", LogTail(log)));
}

int ServeProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 3000; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

ServeProcess::~ServeProcess() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace strata::server
