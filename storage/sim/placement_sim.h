// Placement simulator: replays a multi-turn trace through the placement policy
// (placement.h, the same code the live SessionStore runs) over modelled tiers, and reports
// hit rates, bytes moved, prefetch outcomes and modelled TTFT.
//
// The model mirrors the live store's rules, in whole chunk blocks:
//   - admission: the engine admits waiting turns in arrival order, up to `slots` at once,
//     never two turns of one session; a turn whose session is only on SSD is promoted
//     first (host room made by the policy, any host copy may go) unless recomputing its
//     prefix is faster than loading it (fetch or recompute, by modelled cost);
//   - a finished turn saves its session (prompt + answer - 1 tokens) to host: chunks of the
//     reused prefix are kept, the rest written anew; room is made by demoting host copies
//     that are on SSD too, or evicting those that are not; then the session is written
//     back to SSD, evicting SSD-only sessions when the SSD is full (the old copy stays
//     until the new one is complete, as in the live store);
//   - scheduler-aware prefetch: after every change of the waiting queue (or a gateway hint,
//     `hint_lead_ms` before a returning turn), sessions of the look-ahead held only on SSD
//     are promoted over one modelled SSD channel, taking room only from sessions outside
//     the look-ahead.
// TTFT = queueing + KV load (host→GPU or SSD→host→GPU) + prefill of the tokens not reused.
#ifndef STRATA_STORAGE_SIM_PLACEMENT_SIM_H_
#define STRATA_STORAGE_SIM_PLACEMENT_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "storage/placement.h"
#include "storage/sim/trace.h"

namespace strata::storage {

struct SimOptions {
  PlacementPolicy policy = PlacementPolicy::kSchedulerAware;
  int64_t block_tokens = 256;           // tokens per chunk block
  int64_t kv_bytes_per_token = 131072;  // Llama-3-8B, bf16: 32 layers x 8 KV heads x 128 x 2 x 2 bytes
  int64_t host_blocks = 0;              // host tier capacity
  int64_t ssd_blocks = 0;               // SSD tier capacity
  double ssd_read_bytes_per_s = 3e9;
  double host_to_gpu_bytes_per_s = 25e9;
  double prefill_tokens_per_s = 10000;
  double decode_ms_per_token = 20;
  int slots = 32;                        // turns running at once
  bool sequential = false;               // ignore timestamps: each turn starts when the previous ends
  bool fetch_or_recompute = true;        // recompute an SSD-only prefix when that is faster
  // The gateway's CacheService.Prefetch: this long before each returning turn arrives (the
  // user is typing), its session is hinted to the look-ahead. 0: no hints.
  double hint_lead_ms = 0;
};

enum class SimTier { kNone, kHost, kSsd };

struct SimRequestOutcome {
  SimTier found = SimTier::kNone;  // where the session's KV was when its turn was admitted
  int64_t reused_tokens = 0;       // tokens not recomputed
  bool recomputed = false;         // found on SSD, but recomputing was modelled faster
  double queue_ms = 0;
  double ttft_ms = 0;
};

struct SimResult {
  std::string policy;
  int64_t requests = 0;
  int64_t reusable_requests = 0;  // turns with a prefix a cache could have kept
  int64_t hits_host = 0;
  int64_t hits_ssd = 0;
  int64_t misses = 0;  // reusable turns whose session was gone
  int64_t recomputed = 0;
  int64_t bytes_ssd_to_host = 0;
  int64_t bytes_host_to_ssd = 0;
  int64_t prefetch_in_time = 0;
  int64_t prefetch_late = 0;
  int64_t prefetch_wasted = 0;
  int64_t evictions = 0;
  int64_t demotions = 0;
  double ttft_mean_ms = 0;
  double ttft_p50_ms = 0;
  double ttft_p99_ms = 0;
  std::vector<SimRequestOutcome> outcomes;  // one per trace request, in trace order

  double hit_rate() const {
    return reusable_requests == 0 ? 0 : static_cast<double>(hits_host + hits_ssd) / reusable_requests;
  }
  double host_share() const {
    const int64_t hits = hits_host + hits_ssd;
    return hits == 0 ? 0 : static_cast<double>(hits_host) / hits;
  }
};

// Runs the trace to the end. Deterministic.
SimResult Simulate(const Trace& trace, const SimOptions& options);

// KV blocks of the largest size each session reaches in the trace, summed: the capacity
// that holds every session at once.
int64_t WorkingSetBlocks(const Trace& trace, int64_t block_tokens);

// Tier capacities as fractions of the trace's working set.
struct CapacityPoint {
  double host_fraction = 0;
  double ssd_fraction = 0;
};

// Simulates every policy (scheduler-aware, lru, fifo, belady) at every capacity point,
// all else as in `base`, and returns the results as a Markdown table, one row per
// (capacity point, policy).
std::string ComparePolicies(const Trace& trace, const SimOptions& base, const std::vector<CapacityPoint>& points);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SIM_PLACEMENT_SIM_H_
