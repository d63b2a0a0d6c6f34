// Where a short kernel's time goes, block by block. A developer build (cmake
// -DSTRATA_KERNEL_TIMELINE=ON) has the blocks of the wgmma system part
// (prefill_wgmma_ws.cu) stamp the GPU's global timer (%globaltimer, ns) as they reach each
// phase of their work; `relay_attention_bench --timeline` arms the stamps before a launch and
// prints them (docs/BENCHMARKS.md). The stamps are one device-wide array: every launch of the
// kernel writes them, so arm, launch and read one launch at a time (a benchmark's, not a
// server's). In other builds nothing is stamped, the kernel is unchanged and these calls
// return cudaErrorNotSupported.
#ifndef STRATA_KERNELS_ATTENTION_BLOCK_TIMELINE_H_
#define STRATA_KERNELS_ATTENTION_BLOCK_TIMELINE_H_

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <vector>

namespace strata::kernels::internal {

// The phases a block stamps: thread 0 of the producer warpgroup (entered, located,
// first_landed, producer_done) and thread 0 of the first consumer (the rest).
enum WgmmaPhase : int {
  kEntered,       // the block's first instruction
  kLocated,       // its rows and keys looked up, its barriers made (LocateBlock, __syncthreads)
  kFirstLanded,   // the producer's copies of the first K/V tile landed (before its arrival)
  kQReady,        // the consumer's Q rows in shared memory
  kFirstTaken,    // the consumer past its wait for the first K/V tile
  kLoopDone,      // the consumer's last key tile done
  kStored,        // the consumer's output rows and lse stored
  kProducerDone,  // the producer's last tile landed
  kWgmmaPhases
};
inline constexpr const char* kWgmmaPhaseNames[kWgmmaPhases] = {
    "entered", "located", "first tile landed", "Q ready", "first tile taken", "loop done", "stored", "producer done"};

// The most blocks stamped (by linear block index; later ones are not).
inline constexpr int kTimelineMaxBlocks = 4096;

struct BlockTimeline {
  uint64_t armed_ns = 0;  // when the kernel ArmWgmmaTimeline launched ran (just before)
  // One entry a block that entered, in grid order: the time of each phase, 0 where the
  // block did not reach it (a block without rows returns after kEntered).
  std::vector<std::array<uint64_t, kWgmmaPhases>> blocks;
};

// Whether this build stamps (configured with -DSTRATA_KERNEL_TIMELINE=ON).
bool WgmmaTimelineStamps();
// Clears the stamps and stamps the time on `stream`: launch the kernel right after it.
cudaError_t ArmWgmmaTimeline(cudaStream_t stream);
// Waits for the device and reads the stamps of the last armed launch.
cudaError_t ReadWgmmaTimeline(BlockTimeline* out);

// The wgmma form's block: threads and dynamic shared memory at `head_dim` (for a peer kernel
// of the same shape, e.g. an empty one).
inline constexpr int kWgmmaThreads = 384;
int WgmmaSmemBytes(int head_dim);

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_ATTENTION_BLOCK_TIMELINE_H_
