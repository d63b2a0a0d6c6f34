#include "engine/turn.h"

namespace strata::engine {

bool TurnStream::Next(Event* event, absl::Duration timeout) {
  MutexLock lock(&mu_);
  if (drained_) return false;
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty() && !asleep_; };
  if (!mu_.AwaitWithTimeout(ready, timeout)) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  if (event->done.has_value() || !event->error.ok()) drained_ = true;
  return true;
}

void TurnStream::Cancel(CancelReason why) {
  MutexLock lock(&mu_);
  if (cancelled_) return;
  cancelled_ = true;
  cancel_reason_ = why;
}

bool TurnStream::cancelled() const {
  MutexLock lock(&mu_);
  return cancelled_;
}

CancelReason TurnStream::cancel_reason() const {
  MutexLock lock(&mu_);
  return cancel_reason_;
}

void TurnStream::PushDelta(absl::Span<const int32_t> token_ids, std::string_view text, bool wake) {
  MutexLock lock(&mu_);
  if (closed_) return;
  // Events already there to be taken stay so; a first one pushed without a wake waits for it.
  if (wake) {
    asleep_ = false;
  } else if (events_.empty()) {
    asleep_ = true;
  }
  // Coalesce into the last undelivered delta, so a slow reader costs no memory per token.
  if (!events_.empty() && !events_.back().done.has_value() && events_.back().error.ok()) {
    Event& e = events_.back();
    e.token_ids.insert(e.token_ids.end(), token_ids.begin(), token_ids.end());
    e.text.append(text);
    return;
  }
  Event e;
  e.token_ids.assign(token_ids.begin(), token_ids.end());
  e.text = std::string(text);
  events_.push_back(std::move(e));
}

void TurnStream::Wake() {
  MutexLock lock(&mu_);
  asleep_ = false;  // the unlock wakes a consumer waiting in Next
}

void TurnStream::Finish(const TurnResult& result) {
  MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  asleep_ = false;
  Event e;
  e.done = result;
  events_.push_back(std::move(e));
}

void TurnStream::Fail(const absl::Status& status) {
  MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  asleep_ = false;
  Event e;
  e.error = status.ok() ? absl::InternalError("turn failed without a reason") : status;
  events_.push_back(std::move(e));
}

}  // namespace strata::engine
