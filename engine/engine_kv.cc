// The engine's KV traffic with the session cache: loading a turn's cached prefix into its
// sequence, saving a finished turn's KV (asynchronous write-back) and letting go of both
// once the backend's copies completed.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace strata::engine {

int64_t Engine::LoadPrefix(Running& r, const storage::PrefixMatch& match, int64_t from) {
  // The chunks are leased (pinned in the host tier, no store lock held) while the backend
  // copies them; the lease goes once the copies completed.
  absl::StatusOr<storage::ChunkLease> lease = store_->Lease(r.request.key, match.gap + match.tokens);
  if (!lease.ok()) return from;
  const storage::ChunkLayout& layout = store_->layout();
  // The stored tokens to place and where they go now: [from, kept) where they were, and
  // across a cut the run [kept + gap, gap + tokens) `gap` positions earlier.
  struct Range {
    int64_t stored_begin, stored_end, shift;
  };
  const Range ranges[] = {{from, match.kept, 0}, {match.kept + match.gap, match.gap + match.tokens, match.gap}};
  int64_t placed = from;  // own tokens in place, from 0
  absl::Status status;
  for (const Range& range : ranges) {
    if (range.stored_begin >= range.stored_end) continue;
    for (const storage::LeasedChunk& chunk : lease->chunks()) {
      const int64_t begin = std::max(range.stored_begin, chunk.token_begin);
      const int64_t end = std::min(range.stored_end, chunk.token_begin + chunk.count);
      if (begin >= end) continue;
      if (begin - range.shift != placed) break;  // the lease ended early: the rest is computed
      status = model_->LoadKvRows(*r.seq, r.base_tokens + placed, static_cast<int>(end - begin), chunk.payload, layout,
                                  static_cast<int>(begin - chunk.token_begin));
      if (!status.ok()) break;  // a chunk the backend cannot place ends the reuse there
      placed += end - begin;
    }
    if (!status.ok() || placed != range.stored_end - range.shift) break;
  }
  if (!status.ok()) LOG_EVERY_N_SEC(WARNING, 10) << "placing cached KV failed, recomputing from there: " << status;
  round_leases_.push_back(*std::move(lease));  // read until the backend says the copies are done
  return placed;
}

void Engine::StartLoads(const std::vector<Running*>& loaded) {
  if (round_leases_.empty()) return;
  absl::StatusOr<uint64_t> ticket = model_->StartKvTransfers();
  if (!ticket.ok()) {
    LOG(WARNING) << "starting cached KV loads failed; those turns compute their prompts: " << ticket.status();
    for (Running* r : loaded) {
      // A shared prompt's tokens are in the sequence it was made on: those stay.
      r->reused = r->computed = r->base_tokens;
      r->keep = 0;
      r->tier = r->base_tokens > 0 ? storage::Tier::kHbm : storage::Tier::kNone;
    }
    (void)model_->FinishKvTransfers();
    round_leases_.clear();
    return;
  }
  loads_in_flight_.push_back(LoadsInFlight{*ticket, std::move(round_leases_)});
  round_leases_.clear();
}

void Engine::ReleaseLoads(bool wait) {
  if (wait && !loads_in_flight_.empty()) {
    if (absl::Status s = model_->FinishKvTransfers(); !s.ok()) LOG(WARNING) << "KV loads failed: " << s;
    loads_in_flight_.clear();
    return;
  }
  while (!loads_in_flight_.empty()) {
    absl::StatusOr<bool> done = model_->KvTransfersDone(loads_in_flight_.front().ticket);
    if (!done.ok()) {
      // A device fault: nothing moves any more (the steps fail on their own).
      LOG(WARNING) << "KV loads failed: " << done.status();
      (void)model_->FinishKvTransfers();
      loads_in_flight_.clear();
      return;
    }
    if (!*done) return;
    loads_in_flight_.pop_front();
  }
}

bool Engine::StartSave(Running& r, std::shared_ptr<model::SequenceState> shared) {
  if (store_ == nullptr || r.computed <= r.base_tokens) return false;
  // Asynchronous write-back: the copies are enqueued chunk by chunk into the chunks the
  // store reserves, and the session counts as saved when they complete (ReleaseSaves). On
  // a shared prompt the session stores only its own tokens, on the prompt's id.
  const model::SequenceState& seq = shared != nullptr ? *shared : *r.seq;
  const storage::ChunkLayout& layout = store_->layout();
  std::vector<int32_t> tokens(r.tokens.begin(), r.tokens.begin() + r.computed);
  const absl::Span<const int32_t> own = absl::MakeConstSpan(tokens).subspan(static_cast<size_t>(r.base_tokens));
  absl::Status fill_status;
  absl::StatusOr<uint64_t> fill = store_->SaveAsync(
      r.request.key, own, r.keep,
      [&](int64_t begin, int count, absl::Span<std::byte> payload) {
        if (!fill_status.ok()) return;
        fill_status = model_->SaveKv(seq, r.base_tokens + begin, count, payload, layout);
      },
      r.base);
  if (fill.ok()) {
    absl::StatusOr<uint64_t> ticket = fill_status.ok() ? model_->MarkKvSaves() : fill_status;
    if (ticket.ok()) {
      saves_in_flight_.push_back(SaveInFlight{*ticket, *fill, r.request.key, r.session_key, std::move(r.seq),
                                              std::move(tokens), r.base_tokens, std::move(shared)});
      return true;
    }
    // The chunks may hold garbage: the session must not be served from them.
    LOG(WARNING) << "copying KV to the session cache failed; dropping the session: " << ticket.status();
    (void)model_->FinishKvSaves();
    // Saves of this turn the backend could not complete are reported again by the next
    // MarkKvSaves (model_backend.h): taken back here, they fail this turn, not the next.
    (void)model_->MarkKvSaves();
    store_->FinishFill(*fill, ticket.status());
  } else if (!absl::IsResourceExhausted(fill.status())) {
    LOG(WARNING) << "session cache save failed: " << fill.status();
  }
  return false;
}

Engine::SaveInFlight* Engine::LendingSave(const Queued& queued) {
  if (hbm_ == nullptr || !hbm_->enabled() || queued.request.batch || queued.prompt_job || !queued.prompt_key.empty()) {
    return nullptr;
  }
  const std::string session_key = storage::SessionMapKey(queued.request.key);
  for (auto it = saves_in_flight_.rbegin(); it != saves_in_flight_.rend(); ++it) {
    if (it->session_key != session_key) continue;
    // The session's latest save: one on a shared prompt, or already lent, lends nothing.
    if (it->lent || it->seq == nullptr || it->shared != nullptr || it->base_tokens != 0) return nullptr;
    const std::vector<int32_t>& saved = it->tokens;
    const std::vector<int32_t>& prompt = queued.request.prompt;
    // The turn computes at least its last prompt token, after every saved one.
    if (prompt.size() <= saved.size() || !std::equal(saved.begin(), saved.end(), prompt.begin())) return nullptr;
    return &*it;
  }
  return nullptr;
}

std::unique_ptr<model::SequenceState> Engine::BorrowSaving(const Queued& queued, int64_t capacity, int64_t* tokens,
                                                           uint64_t* lent_by) {
  if (queued.borrow == 0) return nullptr;
  auto f = std::find_if(saves_in_flight_.begin(), saves_in_flight_.end(),
                        [&](const SaveInFlight& s) { return s.ticket == queued.borrow; });
  if (f == saves_in_flight_.end() || f->seq == nullptr) return nullptr;
  // Grown in place: the pages the copy reads stay where they are.
  if (!hbm_->Resize(*f->seq, capacity).ok()) return nullptr;
  *tokens = static_cast<int64_t>(f->tokens.size());
  *lent_by = f->ticket;
  return std::move(f->seq);
}

void Engine::ReleaseSequence(Running& r) {
  if (r.lent_by != 0 && r.seq != nullptr) {
    for (SaveInFlight& f : saves_in_flight_) {
      if (f.ticket != r.lent_by) continue;
      // The save's tokens are still what the sequence holds first: kept as the save
      // would have kept them (ReleaseSaves shrinks it to them).
      f.seq = std::move(r.seq);
      return;
    }
  }
  r.seq.reset();
}

void Engine::End(Running& r, FinishReason reason) {
  const bool saving = !r.request.batch && StartSave(r, nullptr);  // a batch turn has no session
  {
    MutexLock lock(&mu_);
    if (!r.prompt_key.empty()) ReleasePromptUseLocked(r.prompt_key, r.prompt_use);
  }
  TurnResult result;
  result.usage.prompt_tokens = static_cast<int64_t>(r.request.prompt.size());
  result.usage.cached_tokens = r.reused;
  result.usage.computed_tokens = result.usage.prompt_tokens - r.reused;
  result.usage.completion_tokens = r.generated;
  result.cache_tier = r.tier;
  result.ttft_ms = r.ttft_ms;
  result.finish = reason;
  result.truncated_tokens = r.request.truncated_tokens;
  // Counted before the stream ends: whoever saw the end sees it counted.
  if (reason == FinishReason::kCancelled) {
    const absl::Status why = CancelStatus(*r.stream);
    if (metrics_) metrics_->TurnEnded(EndOf(why), r);
    r.stream->Fail(why);
  } else {
    if (metrics_) metrics_->TurnEnded(reason == FinishReason::kLength ? TurnEnd::kLength : TurnEnd::kStop, r);
    r.stream->Finish(result);
  }
  ReleaseSequence(r);  // marks the turn as ended for the step's clean-up (a saving one moved it)
  if (saving) return;  // the session stays active until its write-back completes
  MutexLock lock(&mu_);
  active_sessions_.erase(r.session_key);
}

void Engine::ReleaseSaves(bool wait) {
  if (saves_in_flight_.empty()) return;
  absl::Status fault;
  if (wait) fault = model_->FinishKvSaves();
  while (!saves_in_flight_.empty()) {
    SaveInFlight& f = saves_in_flight_.front();
    if (fault.ok() && !wait) {
      absl::StatusOr<bool> done = model_->KvSavesDone(f.ticket);
      if (!done.ok()) {
        fault = done.status();
        (void)model_->FinishKvSaves();  // nothing moves any more; let it settle
      } else if (!*done) {
        return;
      }
    }
    if (!fault.ok()) {
      LOG(WARNING) << "copying KV to the session cache failed; dropping the session: " << fault;
      store_->FinishFill(f.fill, fault);
    } else {
      store_->FinishFill(f.fill, absl::OkStatus());
      // Saved to the host tier: the sequence may stay in HBM for the session's next turn
      // (a shared prompt's stays with the prompt).
      // A turn running on the sequence this save lent keeps the chunks it filled.
      for (auto& r : running_) {
        if (r->lent_by != 0 && r->lent_by == f.ticket) {
          r->keep = std::max(r->keep, static_cast<int64_t>(f.tokens.size()));
        }
      }
      if (f.seq != nullptr) hbm_->Keep(f.key, std::move(f.seq), std::move(f.tokens), f.base_tokens);
      DropPromptSavedAfterItsDrop(f);
    }
    for (auto& r : running_) {
      if (r->lent_by == f.ticket) r->lent_by = 0;  // its sequence is its own now
    }
    f.seq.reset();
    if (!f.lent) {  // a borrower's session stays active while its turn runs
      MutexLock lock(&mu_);
      active_sessions_.erase(f.session_key);
    }
    saves_in_flight_.pop_front();
  }
}

}  // namespace strata::engine
