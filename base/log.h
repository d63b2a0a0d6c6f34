// Minimal logging: LOG(INFO|WARNING|ERROR) << ...; one line to stderr with time and
// source. (Debian 12's Abseil predates absl/log.) Thread-safe: each line is written with
// one call.
#ifndef STRATA_BASE_LOG_H_
#define STRATA_BASE_LOG_H_

#include <sstream>
#include <string>

namespace strata::logging {

enum class Severity { kInfo, kWarning, kError };

class LogLine {
 public:
  LogLine(Severity severity, const char* file, int line);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace strata::logging

#define STRATA_LOG_SEVERITY_INFO ::strata::logging::Severity::kInfo
#define STRATA_LOG_SEVERITY_WARNING ::strata::logging::Severity::kWarning
#define STRATA_LOG_SEVERITY_ERROR ::strata::logging::Severity::kError
#define LOG(severity) \
  ::strata::logging::LogLine(STRATA_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()

#endif  // STRATA_BASE_LOG_H_
