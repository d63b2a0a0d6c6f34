// Traces of multi-turn chat requests, for the placement simulator (placement_sim.h).
//
// Three sources, one shape (a Trace of requests resolved to sessions):
//   - the public Mooncake trace format: JSONL, one object a line, with `timestamp` (ms,
//     integer or float), `input_length`, `output_length` and `hash_ids` (ids of the
//     prompt's 512-token blocks, in order; requests sharing leading ids share that prefix);
//   - a plain format with an explicit session: JSONL with `timestamp` (ms), `session_id`
//     (string), `input_length` (the turn's NEW prompt tokens) and `output_length`;
//   - a synthetic generator shaped like the AttentionStore (ShareGPT) evaluation.
//
// Loaders skip blank lines and ignore fields they do not know. Lengths must be
// non-negative JSON integers, hash ids JSON integers. Error messages name the line as
// `path:N:` with N counted from 1 (blank lines included).
//
// All functions are thread-safe (they share no state); none throws.
#ifndef STRATA_STORAGE_SIM_TRACE_H_
#define STRATA_STORAGE_SIM_TRACE_H_

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
  bool operator==(const TraceRequest&) const = default;
};

struct Trace {
  std::vector<TraceRequest> requests;  // sorted by arrival_ms (stable: ties keep file order)
  int64_t sessions = 0;                // distinct session ids
  bool operator==(const Trace&) const = default;
};

// The Mooncake format. Requests are resolved in arrival order (a stable sort of the lines
// by timestamp; timestamps may go backwards in the file). A request continues the session
// whose latest request's hash_ids are the longest non-empty list that is a whole prefix
// of its own hash_ids (equal lists included; ties: the session whose list was set most
// recently), reusing min(that list's length x block_tokens, input_length) tokens;
// otherwise it starts session "m<N>", N its 0-based line number (blank lines counted),
// reusing 0. Either way that session's latest list becomes this request's hash_ids.
// context_tokens = input_length.
//
// Errors: NotFound when `path` does not exist (other open failures as errno says);
// InvalidArgument for block_tokens <= 0 or, naming the line and the problem, for a line
// that is not a JSON object, lacks a field, or has a mistyped field, a negative length or
// a non-integer hash id; DataLoss when reading fails midway. Time and memory are linear in
// the total number of hash ids.
absl::StatusOr<Trace> LoadMooncakeTrace(const std::string& path, int64_t block_tokens = 512);

// The plain session format. Lines are processed in timestamp order (stable sort). A
// session's history accumulates: its first turn reuses 0 tokens; every later turn reuses
// the previous turn's context_tokens + output_tokens; context_tokens = reusable_tokens +
// input_length. session_id must be a non-empty string. Errors as LoadMooncakeTrace.
absl::StatusOr<Trace> LoadSessionTrace(const std::string& path);

// Either format, chosen by the first non-blank line: it has `hash_ids` → Mooncake (with
// 512-token blocks); else it has `session_id` → the session format. InvalidArgument when
// that line is not a JSON object or has neither field, or the file has no non-blank line;
// otherwise the chosen loader's result.
absl::StatusOr<Trace> LoadTrace(const std::string& path);

// Writes `trace` in the plain session format, one line per request in order, with
// input_length = context_tokens - reusable_tokens and timestamps that read back exactly.
// LoadSessionTrace gives back an equal Trace when every request's reusable_tokens equals its
// session's previous context_tokens + output_tokens (0 for the first turn), as in
// LoadSessionTrace's and SyntheticTrace's traces; others (a Mooncake trace's) are written
// but read back with the accumulated history instead.
//
// Errors: InvalidArgument, before anything is written, for a request with a non-finite
// arrival, an empty or non-UTF-8 session_id, negative token counts or reusable_tokens >
// context_tokens; NotFound, PermissionDenied, ... (from errno) when `path` cannot be
// created; DataLoss when writing fails. Replaces an existing file.
absl::Status WriteSessionTrace(const Trace& trace, const std::string& path);

struct SyntheticTraceOptions {
  int64_t sessions = 9000;
  double mean_turns = 5.75;            // turns per session: 1 + geometric, this mean; capped at 100
  double session_rate_per_s = 1.0;     // Poisson arrivals of sessions' first turns
  double mean_prompt_tokens = 100;     // new user tokens per turn (exponential, rounded, >= 1)
  double mean_output_tokens = 300;     // answer tokens per turn (exponential, rounded, >= 1)
  double mean_think_s = 60;            // exponential gap between a session's turn arrivals
  int64_t max_context_tokens = 32768;  // a session ends when its next prompt would exceed this
  uint64_t seed = 1;

  // InvalidArgument naming the field unless sessions >= 0, mean_turns >= 1,
  // session_rate_per_s > 0, mean_prompt_tokens >= 1, mean_output_tokens >= 1,
  // mean_think_s >= 0, max_context_tokens >= 1 and every double is finite.
  absl::Status Validate() const;
};

// A trace of `options.sessions` sessions "s0", "s1", ... (numbered by start), sorted by
// arrival. Session starts are a Poisson process; each turn arrives an exponential think
// time after the session's previous turn (overlap is the simulator's business). A session's
// first turn is clamped to max_context_tokens, so every session has one; it ends early when
// its next prompt (history + new tokens) would exceed max_context_tokens. reusable_tokens and
// context_tokens accumulate as in LoadSessionTrace.
//
// Deterministic for a seed on a given platform: std::mt19937_64 and inverse-CDF sampling of
// its own, not <random>'s distributions (std::log still comes from the C library). Returns an
// empty Trace when options.Validate() is not OK.
Trace SyntheticTrace(const SyntheticTraceOptions& options);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SIM_TRACE_H_
