#include "tests/e2e/headless_chromium.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace strata::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text) { return text.size() > 3000 ? text.substr(text.size() - 3000) : text; }

}  // namespace

absl::StatusOr<HeadlessChromium> HeadlessChromium::Find() {
  if (const char* env = std::getenv("STRATA_CHROMIUM"); env != nullptr && *env != '\0') {
    if (access(env, X_OK) == 0) return HeadlessChromium(env);
    return absl::NotFoundError(absl::StrCat("STRATA_CHROMIUM=", env, " is not an executable"));
  }
  const char* path = std::getenv("PATH");
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
      std::string candidate = absl::StrCat(dir, "/", name);
      if (access(candidate.c_str(), X_OK) == 0) return HeadlessChromium(candidate);
    }
  }
  return absl::NotFoundError(
      "no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium; or set "
      "STRATA_CHROMIUM)");
}

absl::StatusOr<std::string> HeadlessChromium::Run(const std::vector<std::string>& args) {
  char tmpl[] = "/tmp/strata-chromium-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = tmpl;
  std::vector<std::string> argv = {binary_,
                                   "--headless",
                                   "--disable-gpu",
                                   "--no-sandbox",  // as root, and in containers without user namespaces
                                   "--disable-dev-shm-usage",
                                   "--no-first-run",
                                   "--no-default-browser-check",
                                   "--disable-extensions",
                                   "--disable-background-networking",
                                   "--disable-component-update",
                                   "--disable-sync",
                                   "--hide-scrollbars",
                                   "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                                   "--enable-logging=stderr",
                                   "--user-data-dir=" + dir + "/profile"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // its renderer and GPU processes with it, for the kill below
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) _exit(126);
    dup2(o, STDOUT_FILENO);
    dup2(e, STDERR_FILENO);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  int status = 0;
  bool exited = false;
  while (absl::Now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (!exited) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  std::string stdout_text = ReadFile(out);
  last_stderr_ = ReadFile(err);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (!exited) {
    return absl::DeadlineExceededError(absl::StrCat(binary_, " ran past two minutes; stderr:\n", Tail(last_stderr_)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat(binary_, " failed (wait status ", status, "); stderr:\n", Tail(last_stderr_)));
  }
  return stdout_text;
}

absl::StatusOr<std::string> HeadlessChromium::DumpDom(const std::string& url, absl::Duration budget) {
  return Run({absl::StrCat("--virtual-time-budget=", absl::ToInt64Milliseconds(budget)), "--dump-dom", url});
}

absl::Status HeadlessChromium::Screenshot(const std::string& url, absl::Duration budget, int width, int height,
                                          const std::string& png_path) {
  auto out = Run({absl::StrCat("--virtual-time-budget=", absl::ToInt64Milliseconds(budget)),
                  absl::StrCat("--window-size=", width, ",", height), "--screenshot=" + png_path, url});
  if (!out.ok()) return out.status();
  if (!std::filesystem::exists(png_path)) {
    return absl::InternalError(absl::StrCat(binary_, " wrote no ", png_path, "; stderr:\n", Tail(last_stderr_)));
  }
  return absl::OkStatus();
}

}  // namespace strata::testing
