#include "base/cpu_idle_pollers.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The CPUs this process may run on, in order.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Pins the calling thread to `cpu` at SCHED_IDLE; the error says what failed.
std::string BecomePoller(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); e != 0) {
    return absl::StrCat("pinning a poller to CPU ", cpu, ": ", std::strerror(e));
  }
  sched_param param{};
  if (int e = pthread_setschedparam(pthread_self(), SCHED_IDLE, &param); e != 0) {
    return absl::StrCat("SCHED_IDLE for the poller on CPU ", cpu, ": ", std::strerror(e));
  }
  return "";
}

}  // namespace

absl::Status CpuIdlePollers::Start(int count) {
  if (!threads_.empty()) return absl::FailedPreconditionError("the CPU idle pollers are running already");
  const std::vector<int> cpus = AllowedCpus();
  if (count < -1 || count > static_cast<int>(cpus.size())) {
    return absl::InvalidArgumentError(absl::StrCat("CPU idle pollers: -1 (one per CPU), 0 (off) or up to ",
                                                   cpus.size(), " (the CPUs this process may use), not ", count));
  }
  const int n = count == -1 ? static_cast<int>(cpus.size()) : count;
  stop_.store(false);
  std::vector<std::string> errors(n);
  std::vector<pid_t> tids(n);
  // Threads up so far (an atomic, not absl::Notification: Debian's Abseil is not built
  // for TSan, which would not see the hand-off; base/mutex.h). A thread does not touch it,
  // nor the references it took, after its increment.
  std::atomic<int> up{0};
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this, cpu = cpus[i], &error = errors[i], &tid = tids[i], &up] {
      tid = gettid();
      error = BecomePoller(cpu);
      const bool ok = error.empty();
      up.fetch_add(1, std::memory_order_release);
      if (!ok) return;
      while (!stop_.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 64; ++k) Pause();
      }
    });
  }
  while (up.load(std::memory_order_acquire) < n) std::this_thread::yield();
  for (int i = 0; i < n; ++i) {
    if (!errors[i].empty()) {
      Stop();
      return absl::FailedPreconditionError(errors[i]);
    }
    pollers_.push_back(Poller{tids[i], cpus[i]});
  }
  return absl::OkStatus();
}

void CpuIdlePollers::Stop() {
  stop_.store(true);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  pollers_.clear();
}

std::vector<CpuIdlePollers::Poller> CpuIdlePollers::pollers() const { return pollers_; }

}  // namespace strata
