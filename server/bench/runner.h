// Runner: drives a Workload against a strata ChatService over gRPC and records, per turn,
// what the client saw (latencies, measured here) and what the server reported (ChatDone).
//
// Each session is a closed loop: its turn k+1 is sent no earlier than its scheduled
// arrival and never before its turn k finished, with the prompt = system prompt + every
// earlier turn's new tokens and answer tokens (verbatim) + the turn's new tokens. A worker
// pool of `client_threads` threads sends the turns that are due, earliest first; when all
// are busy a due turn waits (its send time then lags its schedule, which the record shows).
// A turn that fails ends its session: the session's later turns are not sent (their
// history is unknown) and are counted as not sent.
#ifndef STRATA_SERVER_BENCH_RUNNER_H_
#define STRATA_SERVER_BENCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/bench/workload.h"

namespace strata::server::bench {

struct RunnerOptions {
  std::string target;          // host:port of the ChatService
  std::string api_key;         // sent as `authorization: Bearer` when non-empty
  std::string session_prefix;  // prepended to every session_id (keeps runs apart on one server)
  int client_threads = 64;     // turns in flight at most
  absl::Duration request_timeout = absl::Minutes(10);
  // Called after each finished turn with (finished or skipped turns, all turns); calls are
  // serialised, from worker threads. May be empty.
  std::function<void(int64_t done, int64_t total)> on_progress;
  // With Workload::turn_barrier: called once every turn of a round has finished and
  // before the next round is sent (nothing is in flight; the runner waits for it), with
  // the full session IDs (prefix included) of the sessions that go on. May be empty.
  std::function<void(const std::vector<std::string>& session_ids)> between_rounds;
  // between_rounds restarts the server: calls wait for their channel to reconnect (else a
  // call fails at once when its server is gone).
  bool server_restarts = false;
  // Each session's turns go out on one ChatSession call, opened at its first turn and
  // half-closed after its last (as by a gateway that keeps a stream per session), instead
  // of a Chat call per turn. A turn's latencies are then those of a request on a call
  // already open.
  bool chat_stream = false;
};

// What one turn did. Times are milliseconds; latencies are measured by this client.
struct TurnRecord {
  int session = 0;  // index into Workload::sessions
  int turn = 0;
  bool measured = true;
  int status_code = 0;  // grpc::StatusCode; 0 is OK
  std::string error;    // the status message when status_code != 0
  double scheduled_ms = 0;  // from the run start
  double sent_ms = 0;       // from the run start
  double ttft_ms = -1;      // send to first token (-1: none came)
  double e2e_ms = 0;        // send to the end of the stream
  std::vector<double> inter_token_ms;  // one per token after the first
  // From ChatDone (zero when the call failed).
  double server_ttft_ms = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t computed_tokens = 0;
  int64_t completion_tokens = 0;
  int tier = 0;  // v1::Tier of the reused prefix; 0: none
  // The answer: the token IDs the server streamed back, in order (empty when the call
  // failed). Kept for --compare, which checks them against the cache-off server's.
  std::vector<int32_t> answer_tokens;
};

struct RunResult {
  std::vector<TurnRecord> turns;  // in order of completion
  int64_t not_sent_turns = 0;     // later turns of sessions whose earlier turn failed
  double wall_s = 0;              // run start to the last completion
};

// Runs `workload` to its end. Blocks the caller. InvalidArgument for an empty target or
// client_threads < 1; otherwise OK, also when calls fail (the records carry their codes).
absl::StatusOr<RunResult> RunWorkload(const Workload& workload, const RunnerOptions& options);

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_RUNNER_H_
