#include "base/log.h"

#include <unistd.h>

#include <cstring>
#include <ctime>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace strata::logging {

LogLine::LogLine(Severity severity, const char* file, int line) {
  const char* tag = severity == Severity::kInfo ? "I" : severity == Severity::kWarning ? "W" : "E";
  const char* base = std::strrchr(file, '/');
  stream_ << tag << absl::FormatTime("%m%d %H:%M:%E3S", absl::Now(), absl::LocalTimeZone()) << ' '
          << (base ? base + 1 : file) << ':' << line << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write per line keeps lines from different threads whole.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

bool ShouldLogEvery(std::atomic<int64_t>* last_ns, double seconds) {
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = last_ns->load(std::memory_order_relaxed);
  if (last != INT64_MIN && static_cast<double>(now - last) < seconds * 1e9) return false;
  // One thread of those racing here wins the line.
  return last_ns->compare_exchange_strong(last, now, std::memory_order_relaxed);
}

}  // namespace strata::logging
