// One chat turn as the engine sees it: the request, and the stream of events back to the
// thread that serves the call.
#ifndef STRATA_ENGINE_TURN_H_
#define STRATA_ENGINE_TURN_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/mutex.h"
#include "absl/time/time.h"
#include "storage/session_key.h"

namespace strata::engine {

struct SamplingOptions {
  float temperature = 0.0f;  // <= 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;
};

struct TurnRequest {
  storage::SessionKey key;
  std::vector<int32_t> prompt;  // the whole conversation, rendered
  // The system part: the first `system_tokens` tokens of the prompt are a system prompt
  // that other sessions share (recognised under the chat template, registered, or named
  // by the client); 0 for none. Less than the prompt's length.
  int64_t system_tokens = 0;
  int64_t max_new_tokens = 0;
  // A conversation cut to fit the context window (context_window.h): `truncated_tokens`
  // of the sent conversation were dropped right after its first `kept_prefix_tokens`
  // tokens (the system part or the client's keep prefix). 0: not cut.
  int64_t truncated_tokens = 0;
  int64_t kept_prefix_tokens = 0;
  SamplingOptions sampling;
  std::vector<std::string> stop;  // stop strings
  // Batch work (BatchService), not a chat turn: admitted after the chat turns queued and
  // never into the running slots EngineOptions::batch_reserved_running keeps for them, its
  // prompt chunks fed after theirs in a step. It has no session: nothing is looked up or
  // saved for its key. Its system part is its group's shared prefix, kept in KV memory only
  // (never stored) until Engine::ReleaseBatchPrefix.
  bool batch = false;
  absl::Time arrival = absl::Now();
};

enum class FinishReason { kStop, kLength, kCancelled };

// Why the thread that serves a turn cancelled it: its client went away, or its call's
// deadline passed.
enum class CancelReason { kClient, kDeadline };

struct TurnUsage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t computed_tokens = 0;
  int64_t completion_tokens = 0;
};

struct TurnResult {
  TurnUsage usage;
  storage::Tier cache_tier = storage::Tier::kNone;
  double ttft_ms = 0;
  FinishReason finish = FinishReason::kStop;
  int64_t truncated_tokens = 0;  // TurnRequest::truncated_tokens
};

// The events of one turn, from the engine loop (producer) to the request thread
// (consumer). Thread-safe. Deltas may be coalesced when the consumer is slower than the
// engine; order is kept.
class TurnStream {
 public:
  struct Event {
    std::vector<int32_t> token_ids;
    std::string text;
    std::optional<TurnResult> done;  // set on the last event
    absl::Status error;              // non-OK on the last event if the turn failed
  };

  // Blocks until an event is ready or `timeout` passes; returns false on timeout. After
  // the last event (done or error), further calls return false at once.
  bool Next(Event* event, absl::Duration timeout);
  // Asks the engine to stop the turn: its client went away (kClient) or its call's
  // deadline passed (kDeadline). The turn then fails with Cancelled or DeadlineExceeded
  // (and is counted so); the first reason given stays. Never blocks.
  void Cancel(CancelReason why = CancelReason::kClient);
  bool cancelled() const;
  // Why it was cancelled; kClient while it is not.
  CancelReason cancel_reason() const;

  // Producer side (the engine loop).
  // `wake`: false leaves a consumer sleeping in Next until Wake() (the engine hands that to
  // a StreamWaker: waking a sleeping thread costs its caller a few microseconds, 64 of them
  // a decode step). Finish and Fail always wake.
  void PushDelta(absl::Span<const int32_t> token_ids, std::string_view text, bool wake = true);
  void Wake();
  void Finish(const TurnResult& result);
  void Fail(const absl::Status& status);

 private:
  mutable Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;    // last event pushed
  bool asleep_ ABSL_GUARDED_BY(mu_) = false;    // events pushed without a wake: Next waits for Wake
  bool drained_ ABSL_GUARDED_BY(mu_) = false;   // last event taken
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  CancelReason cancel_reason_ ABSL_GUARDED_BY(mu_) = CancelReason::kClient;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_TURN_H_
