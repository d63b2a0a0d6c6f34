// Threads that keep CPUs out of their idle state, for `strata serve --cpu_idle_poll_threads`.
//
// On a virtual machine an idle vCPU halts, and waking it (an interrupt through the
// hypervisor) costs on the order of 0.1 ms. A returning turn's token crosses several
// threads between the client's write and its read (gRPC's pollers and handler threads, the
// engine), and after a pause each hand-off may land on a halted vCPU: on the H100 machine a
// gRPC stream's round trip costs 0.5 ms more after 300 ms idle than back to back
// (docs/BENCHMARKS.md). Each poller is pinned to one CPU and spins with `pause` at
// SCHED_IDLE, the lowest policy: it runs only when nothing else wants that CPU, and any
// other thread that becomes runnable there takes the CPU at once. The price is power and
// CPUs that read 100% busy; kernel-side equivalents are the guest's haltpoll cpuidle
// driver or `idle=poll`.
#ifndef STRATA_BASE_CPU_IDLE_POLLERS_H_
#define STRATA_BASE_CPU_IDLE_POLLERS_H_

#include <sys/types.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace strata {

class CpuIdlePollers {
 public:
  CpuIdlePollers() = default;
  CpuIdlePollers(const CpuIdlePollers&) = delete;
  CpuIdlePollers& operator=(const CpuIdlePollers&) = delete;
  ~CpuIdlePollers() { Stop(); }

  // Starts one poller on each of the first `count` CPUs this process may run on (-1: all
  // of them; 0: none). InvalidArgument for a count below -1 or above the CPUs allowed;
  // FailedPrecondition when already started. A thread that cannot take SCHED_IDLE is not
  // left spinning: the error says why, and none is started.
  absl::Status Start(int count);
  // Stops and joins the pollers (idempotent).
  void Stop();

  // The pollers' thread IDs and the CPU each is pinned to (tests).
  struct Poller {
    pid_t tid;
    int cpu;
  };
  std::vector<Poller> pollers() const;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::vector<Poller> pollers_;
};

}  // namespace strata

#endif  // STRATA_BASE_CPU_IDLE_POLLERS_H_
