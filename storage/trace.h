// Traces of multi-turn chat requests, for the placement simulator (placement_sim.h).
//
// Three sources, one shape (a Trace of requests resolved to sessions):
//   - the public Mooncake trace format: JSONL with `timestamp` (ms), `input_length`,
//     `output_length` and `hash_ids` (ids of the prompt's 512-token blocks, in order;
//     requests sharing leading ids share that prefix);
//   - a plain format with an explicit session: JSONL with `timestamp` (ms), `session_id`,
//     `input_length` (the turn's NEW prompt tokens) and `output_length`;
//   - a synthetic generator shaped like the AttentionStore (ShareGPT) evaluation.
#ifndef STRATA_STORAGE_TRACE_H_
#define STRATA_STORAGE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::storage {

// One request of a multi-turn trace, resolved to a session.
struct TraceRequest {
  double arrival_ms = 0;        // from the trace start; non-decreasing within a Trace
  std::string session_id;       // the session it continues (or starts)
  int64_t context_tokens = 0;   // prompt tokens: what a cache could hold + new input
  int64_t reusable_tokens = 0;  // leading prompt tokens the session's previous turn stored
                                // (0 for a session's first turn)
  int64_t output_tokens = 0;    // tokens generated
  // After the turn the session's KV covers context_tokens + output_tokens tokens.
};

struct Trace {
  std::vector<TraceRequest> requests;  // sorted by arrival_ms (stable)
  int64_t sessions = 0;                // distinct session ids
};

// The Mooncake format. A request continues the session whose latest request's hash_ids
// are the longest list that is a whole prefix of its own (ties: the most recent session),
// reusing min(that length x block_tokens, input_length) tokens; otherwise it starts
// session "m<line>" (0-based line number). NotFound when the file cannot be opened;
// InvalidArgument naming the line and the problem for a malformed line (not JSON, a
// missing or mistyped field, a negative length). Blank lines are skipped.
absl::StatusOr<Trace> LoadMooncakeTrace(const std::string& path, int64_t block_tokens = 512);

// The plain session format. A session's history accumulates: its k-th turn reuses the
// previous turn's context + output and adds input_length new tokens. Errors as above.
absl::StatusOr<Trace> LoadSessionTrace(const std::string& path);

// Either format, chosen by the first non-blank line (`hash_ids`: Mooncake; `session_id`:
// plain). InvalidArgument when it is neither.
absl::StatusOr<Trace> LoadTrace(const std::string& path);

// Writes the plain session format (input_length = context - reusable).
absl::Status WriteSessionTrace(const Trace& trace, const std::string& path);

struct SyntheticTraceOptions {
  int64_t sessions = 9000;
  double mean_turns = 5.75;            // turns per session (1 + geometric), capped at 100
  double session_rate_per_s = 1.0;     // Poisson arrivals of sessions' first turns
  double mean_prompt_tokens = 100;     // new user tokens per turn (exponential, >= 1)
  double mean_output_tokens = 300;     // answer tokens per turn (exponential, >= 1)
  double mean_think_s = 60;            // exponential gap between a session's turn arrivals
  int64_t max_context_tokens = 32768;  // a session ends when its next prompt would not fit
  uint64_t seed = 1;
};

// Sessions "s0", "s1", ...; deterministic for a seed (its own inverse-CDF sampling, so the
// trace does not depend on the standard library's distributions).
Trace SyntheticTrace(const SyntheticTraceOptions& options);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_TRACE_H_
