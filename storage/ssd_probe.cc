#include "storage/ssd_probe.h"

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "base/mutex.h"
#include "base/random.h"

namespace strata::storage {
namespace {

// Counts completions of a batch of requests; the first error wins.
class Batch {
 public:
  explicit Batch(int n) : left_(n) {}
  SsdTier::Callback Done() {
    return [this](absl::Status s) {
      MutexLock lock(&mu_);
      if (status_.ok()) status_ = s;
      --left_;
    };
  }
  absl::Status Wait() {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return left_ == 0; });
    return status_;
  }

 private:
  Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<double> MeasureSsdReadBytesPerSecond(SsdTier& ssd, int64_t bytes) {
  const int64_t block = ssd.block_bytes();
  const int64_t n = std::clamp<int64_t>(bytes / block, 1, std::min<int64_t>(ssd.free_blocks(), 256));
  if (ssd.free_blocks() == 0) return absl::FailedPreconditionError("the SSD tier has no free block to probe");
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, static_cast<size_t>(n * block)) != 0) {
    return absl::ResourceExhaustedError("no memory for the SSD probe's buffer");
  }
  std::unique_ptr<std::byte, decltype(&free)> buffer(static_cast<std::byte*>(raw), &free);
  // Random bytes: a drive that compresses or deduplicates gets no head start.
  SplitMix64 rng(0x55d);
  for (int64_t i = 0; i < n * block; i += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(buffer.get() + i, &v, static_cast<size_t>(std::min<int64_t>(8, n * block - i)));
  }
  std::vector<SsdLocation> blocks;
  for (int64_t i = 0; i < n; ++i) {
    std::optional<SsdLocation> loc = ssd.Allocate();
    if (!loc) break;
    blocks.push_back(*loc);
  }
  auto free_blocks = [&] {
    for (const SsdLocation& loc : blocks) ssd.Free(loc);
  };
  {
    Batch writes(static_cast<int>(blocks.size()));
    for (size_t i = 0; i < blocks.size(); ++i) ssd.Write(blocks[i], buffer.get() + i * block, writes.Done());
    if (absl::Status s = writes.Wait(); !s.ok()) {
      free_blocks();
      return s;
    }
  }
  Batch reads(static_cast<int>(blocks.size()));
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < blocks.size(); ++i) ssd.Read(blocks[i], buffer.get() + i * block, reads.Done());
  absl::Status read = reads.Wait();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  free_blocks();
  (void)ssd.TakeIoSamples();  // the probe's I/O is not the tier's traffic
  if (!read.ok()) return read;
  return static_cast<double>(blocks.size()) * static_cast<double>(block) / std::max(seconds, 1e-9);
}

}  // namespace strata::storage
