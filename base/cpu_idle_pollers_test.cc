#include "base/cpu_idle_pollers.h"

#include <sched.h>
#include <sys/stat.h>

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

int AllowedCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

bool ThreadExists(pid_t tid) {
  struct stat st;
  return stat(("/proc/self/task/" + std::to_string(tid)).c_str(), &st) == 0;
}

// Whether the thread's task is gone within `timeout`: a joined thread's /proc entry can
// outlive the join by a moment (the join returns once the kernel clears its tid, before
// the task is released), which made the check flaky under load.
bool ThreadGoneWithin(pid_t tid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (ThreadExists(tid)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(CpuIdlePollersTest, OnePollerPerCpuPinnedAtIdlePriorityAndGoneAfterStop) {
  const int cpus = AllowedCpuCount();
  CpuIdlePollers pollers;
  ASSERT_TRUE(pollers.Start(-1).ok());
  const std::vector<CpuIdlePollers::Poller> running = pollers.pollers();
  ASSERT_EQ(static_cast<int>(running.size()), cpus);
  cpu_set_t seen;
  CPU_ZERO(&seen);
  for (const auto& p : running) {
    EXPECT_TRUE(ThreadExists(p.tid));
    EXPECT_EQ(sched_getscheduler(p.tid), SCHED_IDLE) << "poller on CPU " << p.cpu;
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(p.tid, sizeof(set), &set), 0);
    EXPECT_EQ(CPU_COUNT(&set), 1);
    EXPECT_TRUE(CPU_ISSET(p.cpu, &set));
    EXPECT_FALSE(CPU_ISSET(p.cpu, &seen)) << "two pollers on CPU " << p.cpu;
    CPU_SET(p.cpu, &seen);
  }
  // This thread keeps its own scheduling.
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
  pollers.Stop();
  EXPECT_TRUE(pollers.pollers().empty());
  for (const auto& p : running) {
    EXPECT_TRUE(ThreadGoneWithin(p.tid, absl::Seconds(5))) << "poller " << p.tid << " still runs";
  }
  pollers.Stop();  // idempotent
}

TEST(CpuIdlePollersTest, StartsTheCountAskedAndRefusesBadCounts) {
  const int cpus = AllowedCpuCount();
  CpuIdlePollers pollers;
  EXPECT_EQ(pollers.Start(-2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pollers.Start(cpus + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pollers.pollers().empty());
  ASSERT_TRUE(pollers.Start(0).ok());
  EXPECT_TRUE(pollers.pollers().empty());
  ASSERT_TRUE(pollers.Start(1).ok());
  ASSERT_EQ(pollers.pollers().size(), 1u);
  EXPECT_EQ(pollers.Start(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pollers.pollers().size(), 1u);
  pollers.Stop();
  ASSERT_TRUE(pollers.Start(1).ok());  // restartable after Stop
  EXPECT_EQ(pollers.pollers().size(), 1u);
}

}  // namespace
}  // namespace strata
