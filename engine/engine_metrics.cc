// A turn's life as the engine's metrics see it: queued, admitted, first token, ended (and
// how), and the statuses a cancelled turn fails with.
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace strata::engine {

const char* TurnEndName(TurnEnd end) {
  switch (end) {
    case TurnEnd::kStop: return "stop";
    case TurnEnd::kLength: return "length";
    case TurnEnd::kCancelled: return "cancelled";
    case TurnEnd::kDeadline: return "deadline";
    case TurnEnd::kError: return "error";
    case TurnEnd::kShutdown: return "shutdown";
  }
  return "error";
}

absl::Status CancelStatus(const TurnStream& stream) {
  if (stream.cancel_reason() == CancelReason::kDeadline) {
    return absl::DeadlineExceededError("the call's deadline passed before the turn ended");
  }
  return absl::CancelledError("the client cancelled the turn");
}

TurnEnd EndOf(const absl::Status& why) {
  if (absl::IsCancelled(why)) return TurnEnd::kCancelled;
  if (absl::IsDeadlineExceeded(why)) return TurnEnd::kDeadline;
  return TurnEnd::kError;
}

void Engine::Metrics::TurnStarted(const Running& r) {
  if (r.prompt_job) return;
  queue.Observe(absl::ToDoubleSeconds(r.admitted - r.request.arrival));
}

void Engine::Metrics::FirstToken(const Running& r) {
  if (r.prompt_job) return;
  // Both from the same instants: queue + prefill = TTFT.
  prefill.Observe(absl::ToDoubleSeconds(r.first_token - r.admitted));
  ttft->WithLabels({{"tier", storage::TierName(r.tier)}})
      .Observe(absl::ToDoubleSeconds(r.first_token - r.request.arrival));
}

void Engine::Metrics::TurnEnded(TurnEnd how, const Running& r) {
  if (r.prompt_job) return;
  const absl::Time now = absl::Now();
  if (r.first_token_sent) decode.Observe(absl::ToDoubleSeconds(now - r.first_token));
  Ended(how, r.request, r.generated, now);
}

void Engine::Metrics::TurnEnded(TurnEnd how, const Queued& q) {
  if (q.prompt_job) return;
  Ended(how, q.request, 0, absl::Now());
}

void Engine::Metrics::Ended(TurnEnd how, const TurnRequest& request, int64_t generated, absl::Time now) {
  finished[static_cast<int>(how)]->Increment();
  e2e.Observe(absl::ToDoubleSeconds(now - request.arrival));
  prompt_tokens.Observe(static_cast<double>(request.prompt.size()));
  generation_tokens.Observe(static_cast<double>(generated));
  if (tenants) tenants->TurnEnded(request.key.tenant, generated);
}

}  // namespace strata::engine
