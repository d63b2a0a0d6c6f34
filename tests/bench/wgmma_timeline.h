// relay_attention_bench --timeline: the wgmma system part's blocks phase by phase
// (kernels/attention/block_timeline.h; a build with -DSTRATA_KERNEL_TIMELINE=ON), beside an
// empty kernel of the same grid launched the same way.
#ifndef STRATA_TESTS_BENCH_WGMMA_TIMELINE_H_
#define STRATA_TESTS_BENCH_WGMMA_TIMELINE_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace strata::bench {

// The table's header (markdown), its columns those of WgmmaTimelineRows.
std::string WgmmaTimelineHeader();

// Runs `launch` (one launch of the wgmma system part on `stream`, head_dim `head_dim`) `runs`
// times, each after `flush` with the stamps armed, and returns a markdown row a run: `label`,
// the blocks that ran, the time from the kernel before it to the first block's start, each
// phase's median over the blocks from the block's own start (µs), the span from the first
// block's start to the last one's end, then `kernel_ms` (the launch's event-timed median) and
// an empty kernel's of the same grid, threads and shared memory. Empty when the build stamps
// nothing.
std::string WgmmaTimelineRows(const std::string& label, cudaStream_t stream, int head_dim, int runs, float kernel_ms,
                              const std::function<void()>& launch, const std::function<void()>& flush);

}  // namespace strata::bench

#endif  // STRATA_TESTS_BENCH_WGMMA_TIMELINE_H_
