#include "tests/bench/wgmma_timeline.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/attention/block_timeline.h"
#include "tests/bench/cuda_bench.h"

namespace strata::bench {
namespace {

namespace in = kernels::internal;

}  // namespace

std::string WgmmaTimelineHeader() {
  std::string header = "| shape | blocks | kernel before → first block (us) |";
  std::string rule = "|---|---|---|";
  for (int k = in::kLocated; k < in::kWgmmaPhases; ++k) {
    header += std::string(" ") + in::kWgmmaPhaseNames[k] + " |";
    rule += "---|";
  }
  header += " first block's start → last block's end | kernel, event-timed | empty kernel, same grid |\n";
  return header + rule + "---|---|---|\n";
}

std::string WgmmaTimelineRows(const std::string& label, cudaStream_t stream, int head_dim, int runs, float kernel_ms,
                              const std::function<void()>& launch, const std::function<void()>& flush) {
  std::string rows;
  int blocks = 0;
  for (int r = 0; r < runs; ++r) {
    flush();
    if (in::ArmWgmmaTimeline(stream) != cudaSuccess) return "";
    launch();
    in::BlockTimeline timeline;
    CHECK_CUDA(in::ReadWgmmaTimeline(&timeline));
    if (timeline.blocks.empty()) return "";
    blocks = static_cast<int>(timeline.blocks.size());
    uint64_t first = UINT64_MAX, last = 0;
    std::vector<double> phases[in::kWgmmaPhases];
    for (const auto& b : timeline.blocks) {
      first = std::min(first, b[in::kEntered]);
      last = std::max({last, b[in::kStored], b[in::kProducerDone]});
      for (int k = in::kLocated; k < in::kWgmmaPhases; ++k) {
        if (b[k] != 0) phases[k].push_back(static_cast<double>(b[k] - b[in::kEntered]) * 1e-3);
      }
    }
    absl::StrAppendFormat(&rows, "| %s | %d | %.2f |", label, blocks,
                          static_cast<double>(first - timeline.armed_ns) * 1e-3);
    for (int k = in::kLocated; k < in::kWgmmaPhases; ++k) {
      absl::StrAppendFormat(&rows, " %.2f |", phases[k].empty() ? -1.0 : Median(phases[k]));
    }
    absl::StrAppendFormat(&rows, " %.2f | %.2f |", static_cast<double>(last - first) * 1e-3, kernel_ms * 1e3);
    if (r + 1 < runs) rows += " |\n";  // the empty kernel's column is the last run's
  }
  const float empty_ms = MedianMs(
      stream, 20,
      [&] { CHECK_CUDA(EmptyKernelAsync(blocks, in::kWgmmaThreads, in::WgmmaSmemBytes(head_dim), stream)); }, flush);
  absl::StrAppendFormat(&rows, " %.2f |\n", empty_ms * 1e3);
  return rows;
}

}  // namespace strata::bench
