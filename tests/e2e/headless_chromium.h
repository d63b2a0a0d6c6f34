// HeadlessChromium: Debian's `chromium` run headless on a page, for end-to-end tests of
// what a browser shows: the DOM after the page's scripts ran, and a screenshot.
//
// Every run gets a fresh profile and resolves no host but 127.0.0.1 (any other name fails
// to resolve), so a page that needs the network outside the machine shows it.
#ifndef STRATA_TESTS_E2E_HEADLESS_CHROMIUM_H_
#define STRATA_TESTS_E2E_HEADLESS_CHROMIUM_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata::testing {

class HeadlessChromium {
 public:
  // $STRATA_CHROMIUM if set, else the first of chromium, chromium-browser, google-chrome on
  // PATH. NotFound, saying what was looked for, when there is none.
  static absl::StatusOr<HeadlessChromium> Find();

  // The page's DOM (--dump-dom) once `budget` of virtual time has passed: timers run
  // ahead without waiting, network requests are waited for. Internal with chromium's
  // output tail when it fails; DeadlineExceeded (killed) after two minutes.
  absl::StatusOr<std::string> DumpDom(const std::string& url, absl::Duration budget);

  // Writes a `width` x `height` PNG of the page to `png_path` after `budget` of virtual
  // time. Errors as DumpDom.
  absl::Status Screenshot(const std::string& url, absl::Duration budget, int width, int height,
                          const std::string& png_path);

  // What chromium wrote to stderr on the last run: its own log and the page's console
  // messages ("CONSOLE" lines; an uncaught exception says "Uncaught").
  const std::string& last_stderr() const { return last_stderr_; }
  const std::string& binary() const { return binary_; }

 private:
  explicit HeadlessChromium(std::string binary) : binary_(std::move(binary)) {}
  // Runs chromium with the common flags and `args`; its stdout.
  absl::StatusOr<std::string> Run(const std::vector<std::string>& args);

  std::string binary_;
  std::string last_stderr_;
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_E2E_HEADLESS_CHROMIUM_H_
