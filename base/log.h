// Minimal logging: LOG(INFO|WARNING|ERROR) << ...; one line to stderr with time and
// source. (Debian 12's Abseil predates absl/log.) Thread-safe: each line is written with
// one call.
#ifndef STRATA_BASE_LOG_H_
#define STRATA_BASE_LOG_H_

#include <atomic>
#include <cstdint>
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

// True at most once every `seconds` for one call site (whose own clock `last_ns` is).
bool ShouldLogEvery(std::atomic<int64_t>* last_ns, double seconds);

}  // namespace strata::logging

#define STRATA_LOG_SEVERITY_INFO ::strata::logging::Severity::kInfo
#define STRATA_LOG_SEVERITY_WARNING ::strata::logging::Severity::kWarning
#define STRATA_LOG_SEVERITY_ERROR ::strata::logging::Severity::kError
#define LOG(severity) \
  ::strata::logging::LogLine(STRATA_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()

// LOG_EVERY_N_SEC(INFO, 10) << ...: a line that would repeat under load, at most once
// every N seconds from its call site.
#define LOG_EVERY_N_SEC(severity, seconds)                                                  \
  if (static std::atomic<int64_t> strata_log_last_ns_{INT64_MIN};                           \
      !::strata::logging::ShouldLogEvery(&strata_log_last_ns_, (seconds))) {                \
  } else                                                                                    \
    LOG(severity)

#endif  // STRATA_BASE_LOG_H_
