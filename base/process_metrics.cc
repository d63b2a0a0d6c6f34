#include "base/process_metrics.h"

#include <sys/sysinfo.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace strata::metrics {
namespace {

struct ProcessSample {
  double cpu_seconds = 0, start_time_seconds = 0, virtual_bytes = 0, resident_bytes = 0, open_fds = 0;
};

ProcessSample Sample() {
  ProcessSample s;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  // Fields after the command (which may hold spaces) start after the last ')'.
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string f[25];
    for (auto& x : f) rest >> x;  // fields 3..27 of proc(5)
    // utime 14, stime 15, starttime 22, vsize 23, rss 24 (1-based in proc(5)).
    s.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / ticks;
    struct sysinfo info {};
    sysinfo(&info);
    const double boot = static_cast<double>(std::time(nullptr)) - static_cast<double>(info.uptime);
    s.start_time_seconds = boot + std::stod(f[19]) / ticks;
    s.virtual_bytes = std::stod(f[20]);
    s.resident_bytes = std::stod(f[21]) * page;
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++s.open_fds;
  }
  return s;
}

}  // namespace

void ExportProcessMetrics(Registry& r) {
  auto& cpu = r.AddCounter("process_cpu_seconds_total", "User and system CPU time the process used.").WithLabels({});
  auto& rss = r.AddGauge("process_resident_memory_bytes", "Resident memory.").WithLabels({});
  auto& vsize = r.AddGauge("process_virtual_memory_bytes", "Virtual memory.").WithLabels({});
  auto& fds = r.AddGauge("process_open_fds", "Open file descriptors.").WithLabels({});
  auto& start = r.AddGauge("process_start_time_seconds", "When the process started, Unix time.").WithLabels({});
  r.AddCollector([&cpu, &rss, &vsize, &fds, &start] {
    const ProcessSample s = Sample();
    if (const double delta = s.cpu_seconds - cpu.Value(); delta > 0) cpu.Increment(delta);
    rss.Set(s.resident_bytes);
    vsize.Set(s.virtual_bytes);
    fds.Set(s.open_fds);
    start.Set(s.start_time_seconds);
  });
}

}  // namespace strata::metrics
