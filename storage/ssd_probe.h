// How fast the SSD tier reads, measured before the first promotion needs to know: the
// engine's fetch-or-recompute rule compares it with the prefill speed, and a rule that
// does not know it yet would load a session from a disk slower than recomputing it.
//
// The probe writes up to `bytes` of random blocks into free blocks of the tier (so the
// reads hit the device: preallocated but unwritten extents read as zeros without I/O),
// reads them back all at once with O_DIRECT as a promotion does, and frees them. It
// leaves nothing behind (blocks it took are not in any index record: a crash mid-probe
// frees them at the next start). Blocking; call before the tier serves I/O.
#ifndef STRATA_STORAGE_SSD_PROBE_H_
#define STRATA_STORAGE_SSD_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "storage/ssd_tier.h"

namespace strata::storage {

// Bytes per second of the probe's reads. FailedPrecondition when the tier has no free
// block; the I/O error when a write or read fails.
absl::StatusOr<double> MeasureSsdReadBytesPerSecond(SsdTier& ssd, int64_t bytes);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SSD_PROBE_H_
