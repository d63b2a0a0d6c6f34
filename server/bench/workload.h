// Workloads of `strata bench`: which sessions send which token IDs, and when.
//
// A Workload is fully materialised before a run starts (every turn's new token IDs and
// scheduled arrival), so that a run's content depends only on the options and the seed,
// never on timing. The runner (runner.h) sends a turn's prompt as the session's history
// (system prompt, earlier turns' new tokens and the answers the server returned, verbatim)
// followed by the turn's new tokens, so that the server can reuse its session cache.
//
// Token IDs are in [1, 255]: byte tokens of the built-in model, valid in any vocabulary.
//
// All functions are thread-safe (they share no state); none throws.
#ifndef STRATA_SERVER_BENCH_WORKLOAD_H_
#define STRATA_SERVER_BENCH_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/sim/trace.h"

namespace strata::server::bench {

struct WorkloadTurn {
  double arrival_ms = 0;            // scheduled send time, from the run start
  std::vector<int32_t> new_tokens;  // appended to the session's history
  int32_t max_new_tokens = 1;       // answer length asked for
  bool measured = true;             // counted in the latency percentiles (sweeps: turn 2 only)
  bool operator==(const WorkloadTurn&) const = default;
};

struct WorkloadSession {
  std::string session_id;  // unique within the workload; the runner may prefix it
  int system_prompt = -1;  // index into Workload::system_prompts; -1: none
  std::vector<WorkloadTurn> turns;  // arrival_ms non-decreasing
  bool operator==(const WorkloadSession&) const = default;
};

struct Workload {
  std::string name;  // "synthetic", "trace", "sweep"
  std::vector<std::vector<int32_t>> system_prompts;  // shared leading tokens
  std::vector<WorkloadSession> sessions;
  // When true, no session's turn k+1 is sent before every session's turn k has finished
  // (a sweep releases all second turns at once).
  bool turn_barrier = false;
  // With turn_barrier: each round starts this long after the last one ended.
  double round_gap_ms = 0;

  int64_t TotalTurns() const;
  bool operator==(const Workload&) const = default;
};

// AttentionStore's ShareGPT-shaped load (storage::SyntheticTrace gives the sessions, turns,
// lengths and timing), with optional shared system prompts.
struct SyntheticWorkloadOptions {
  int64_t sessions = 32;
  double session_rate_per_s = 1.0;    // Poisson arrivals of sessions
  double mean_turns = 3;              // 1 + geometric, this mean
  double mean_prompt_tokens = 64;     // new tokens per turn, exponential, >= 1
  double mean_output_tokens = 32;     // answer tokens per turn, exponential, >= 1
  double mean_think_s = 1;            // exponential gap between a session's turn arrivals
  int64_t max_context_tokens = 4096;  // system prompt + history + new tokens, per prompt
  int system_prompts = 0;             // K shared system prompts (0: none) ...
  int64_t system_prompt_tokens = 256;  // ... of S tokens each, one drawn per session
  int32_t max_new_tokens_limit = 4096;  // answer lengths are capped at the server's limit
  uint64_t seed = 1;

  // InvalidArgument naming the flag-like field unless every count is >= its minimum
  // (sessions >= 1, system_prompts >= 0, system_prompt_tokens >= 1 when system_prompts > 0
  // and < max_context_tokens, max_new_tokens_limit >= 1) and storage's own checks pass.
  absl::Status Validate() const;
};

// Session i is "s<i>", numbered by start. Same options and seed, same Workload.
// InvalidArgument when options.Validate() fails.
absl::StatusOr<Workload> MakeSyntheticWorkload(const SyntheticWorkloadOptions& options);

struct TraceWorkloadOptions {
  double time_scale = 1.0;  // arrival_ms = trace arrival x time_scale (0: all at once)
  int32_t max_new_tokens_limit = 4096;
  uint64_t seed = 1;  // only the token contents depend on it
};

// One session per distinct session_id of `trace`, in order of first arrival, each turn
// at its (scaled) arrival with context_tokens - reusable_tokens new tokens (at least 1 for a
// session's first turn) and output_tokens (at least 1, capped) to generate.
// InvalidArgument for a negative or non-finite time_scale or max_new_tokens_limit < 1.
absl::StatusOr<Workload> MakeTraceWorkload(const storage::Trace& trace, const TraceWorkloadOptions& options);

// One cell of a TTFT table: `concurrency` sessions each send turn 1 (history_tokens new
// tokens, answer_tokens to generate, not measured), then, once every turn 1 has finished,
// all send turn 2 at once (the answer of turn 1 + new_tokens, output_tokens to generate;
// measured).
struct SweepShape {
  int64_t history_tokens = 1024;
  int64_t new_tokens = 64;
  int concurrency = 1;
  int32_t answer_tokens = 4;
  int32_t output_tokens = 8;
  uint64_t seed = 1;
  // Pause between turn 1 ending and turn 2 being sent (the write-back of turn 1 lands
  // meanwhile, so a cache-tier test sees the history settled in its tier).
  double gap_ms = 0;
  // InvalidArgument naming the field unless every field is >= 1 (gap_ms >= 0).
  absl::Status Validate() const;
};

// Sessions "h<history>-n<new>-c<concurrency>-<i>". InvalidArgument when shape.Validate() fails.
absl::StatusOr<Workload> MakeSweepWorkload(const SweepShape& shape);

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_WORKLOAD_H_
