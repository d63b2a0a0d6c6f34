// Programmatic dependent launch (dependent_launch.cuh) as strata relies on it: a first kernel
// that allows its dependent at once and writes a cell only after a slow spin; a dependent
// that reads the cell as it starts; then an ordinary kernel that reads it. On a device with
// PDL the dependent starts before the write (it saw the old value: the launch did overlap),
// and the ordinary kernel after it always sees the write (the stream waits for the first
// kernel too, not only for the dependent) — eagerly and replayed from a graph.
#include <cuda_runtime_api.h>

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda_check.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/delay.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;

class CudaDependentLaunchTest : public test_support::GpuTest {
 protected:
  // cells: [0] the first kernel's cell, [1] what the dependent saw, [2] what the kernel after saw.
  void Enqueue(int* cells, int value) {
    ASSERT_EQ(testing::LaunchDelayThenWrite(stream_, 2000, cells, value), cudaSuccess);
    ASSERT_EQ(testing::LaunchCopyInt(stream_, cells, cells + 1, /*dependent=*/true), cudaSuccess);
    ASSERT_EQ(testing::LaunchCopyInt(stream_, cells, cells + 2, /*dependent=*/false), cudaSuccess);
  }
};

TEST_F(CudaDependentLaunchTest, TheDependentOverlapsAndTheNextKernelWaitsForBoth) {
  DeviceVector<int> cells{std::vector<int>{0, -1, -1}};
  // Once first: a kernel's first launch loads its module (lazy loading), which serialises.
  Enqueue(cells.get(), 5);
  Sync();
  ASSERT_EQ(cudaMemcpy(cells.get(), std::vector<int>{0, -1, -1}.data(), 3 * sizeof(int), cudaMemcpyHostToDevice),
            cudaSuccess);
  Enqueue(cells.get(), 7);
  Sync();
  std::vector<int> seen = cells.ToHost();
  EXPECT_EQ(seen[0], 7);
  EXPECT_EQ(seen[2], 7) << "the ordinary kernel after a dependent ran before the first kernel's write";
  if (CurrentDeviceComputeCapability() >= 90) {
    EXPECT_EQ(seen[1], 0) << "the dependent waited for the whole first kernel: no overlap";
  } else {
    EXPECT_EQ(seen[1], 7) << "without PDL the dependent is an ordinary launch";
  }

  // The same three captured in a graph (a programmatic edge), replayed twice.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Enqueue(cells.get(), 9);
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_EQ(cudaMemcpy(cells.get(), std::vector<int>{1, -1, -1}.data(), 3 * sizeof(int), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    Sync();
    seen = cells.ToHost();
    EXPECT_EQ(seen[2], 9) << "replay " << replay << ": the kernel after the dependent ran before the write";
    if (CurrentDeviceComputeCapability() >= 90) {
      EXPECT_EQ(seen[1], 1) << "replay " << replay << ": the graph's dependent did not overlap";
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace strata::kernels
