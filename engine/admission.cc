// Admission: which queued turns start this round (AdmitLocked: the KV budget, one turn per
// session, shared prompts, promotions from SSD), the gateway's look-ahead published to the
// store, and a turn's start (Start: its sequence, taken from the HBM tier or new, and the
// cached prefix it reuses), or its end before it ran (Abandon, Requeue).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/random.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "text/stop_strings.h"

namespace strata::engine {

std::vector<Engine::Queued> Engine::AdmitLocked(std::vector<Promotion>* promote) {
  std::vector<Queued> admitted;
  std::vector<Queued> jobs;  // prompt jobs for shared prompts wanted now
  // Chat turns first (pass 0), then batch turns (pass 1): in a pool of their own
  // (max_running_batch), or else in what chat turns leave of max_running, less the slots
  // kept for chat turns still to come.
  int64_t running_batch = 0;
  for (const auto& r : running_) running_batch += r->request.batch;
  const bool own_pool = options_.max_running_batch > 0;
  int64_t chat_room, batch_room;
  if (own_pool) {
    chat_room = options_.max_running - (static_cast<int64_t>(running_.size()) - running_batch);
    batch_room = options_.max_running_batch - running_batch;
  } else {
    const int64_t reserve = std::min(options_.batch_reserved_running, options_.max_running - 1);
    chat_room = options_.max_running - static_cast<int64_t>(running_.size());
    batch_room = options_.max_running - reserve - running_batch;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (auto it = queue_.begin(); it != queue_.end();) {
      const bool room = pass == 0 ? chat_room > 0 : batch_room > 0 && (own_pool || chat_room > 0);
      if (!room) break;
      if (it->request.batch != (pass == 1) || it->load == Queued::Load::kPromoting || it->prompt_waiting) {
        ++it;
        continue;
      }
      std::string key = storage::SessionMapKey(it->request.key);
      it->borrow = 0;
      SaveInFlight* lender = nullptr;
      if (active_sessions_.contains(key)) {
        // The session's previous turn is still running: this one waits its turn, unless
        // that turn is only being written back and this one can run on its sequence.
        lender = LendingSave(*it);
        if (lender == nullptr) {
          ++it;
          continue;
        }
      }
      if (it->load == Queued::Load::kUnchecked) {
        it->load = Queued::Load::kReady;
        // A session resident in HBM needs nothing from the disk; a batch turn has no session.
        if (store_ != nullptr && !it->request.batch && !hbm_->Contains(it->request.key)) {
          auto info = store_->Get(it->request.key);
          if (info.ok() && info->tier == storage::Tier::kSsd && options_.fetch_or_recompute) {
            // Fetch or recompute, by measured cost.
            const double ssd_bytes_per_s = store_->ssd_read_bytes_per_second();
            const double prefill_tokens_per_s = stats_.prefill_tokens_per_second;
            const double tokens = static_cast<double>(
                std::min<int64_t>(info->cached_tokens, static_cast<int64_t>(it->request.prompt.size())));
            // 0 where a speed is not known yet: then the copy is loaded.
            const double load_s = ssd_bytes_per_s > 0 ? static_cast<double>(info->bytes) / ssd_bytes_per_s : 0;
            const double compute_s = prefill_tokens_per_s > 0 ? tokens / prefill_tokens_per_s : 0;
            if (load_s > 0 && compute_s > 0 && compute_s < load_s) {
              it->recompute = true;
              ++stats_.recomputed_instead_of_load;
            }
            if (metrics_) metrics_->ssd_decisions->WithLabels({{"choice", it->recompute ? "recompute" : "load"}}).Increment();
            LOG_EVERY_N_SEC(INFO, 10) << "a turn's history is only on SSD (" << info->bytes << " bytes, "
                                      << static_cast<int64_t>(tokens) << " tokens): "
                                      << (it->recompute ? "recomputing" : "loading") << " it (load ~"
                                      << static_cast<int64_t>(load_s * 1e3) << " ms at the SSD's rate, recompute ~"
                                      << static_cast<int64_t>(compute_s * 1e3) << " ms)";
          }
          if (info.ok() && info->tier == storage::Tier::kSsd && !it->recompute) {
            it->load = Queued::Load::kPromoting;
            ++promotions_in_flight_;
            promote->push_back(Promotion{it->id, it->request.key});
            ++it;
            continue;
          }
        }
      }
      if (!PromptReadyLocked(*it, &jobs)) {
        ++it;  // waits for its shared prompt's KV
        continue;
      }
      if (lender != nullptr) {
        lender->lent = true;  // the session's turn-taking is this turn's from now
        it->borrow = lender->ticket;
      }
      active_sessions_.insert(std::move(key));
      if (pass == 1) --batch_room;
      if (pass == 0 || !own_pool) --chat_room;
      admitted.push_back(std::move(*it));
      it = queue_.erase(it);
    }
  }
  // Prompt jobs go first: the turns waiting for them are already queued.
  for (auto j = jobs.rbegin(); j != jobs.rend(); ++j) queue_.push_front(std::move(*j));
  return admitted;
}

void Engine::PublishLookAhead() {
  if (store_ == nullptr) return;
  std::vector<storage::SessionKey> keys;
  {
    MutexLock lock(&mu_);
    if (!lookahead_changed_) return;
    lookahead_changed_ = false;
    keys.reserve(queue_.size());
    for (const Queued& q : queue_) {
      if (!q.request.batch) keys.push_back(q.request.key);  // batch turns have no session
    }
  }
  std::vector<std::string> map_keys;
  map_keys.reserve(keys.size());
  for (const storage::SessionKey& k : keys) map_keys.push_back(storage::SessionMapKey(k));
  hbm_->SetQueue(map_keys);
  store_->SetLookAhead(keys);
}

void Engine::StartPromotions(std::vector<Promotion> promote) {
  for (Promotion& p : promote) {
    // Whatever the outcome, the turn is then admitted: on a failed promotion its prefix
    // is a miss (or a synchronous read) and it is computed.
    store_->Promote(p.key, [this, id = p.id](absl::Status status) {
      if (!status.ok()) LOG(WARNING) << "bringing a session up from SSD failed; its turn computes it: " << status;
      MutexLock lock(&mu_);
      for (Queued& q : queue_) {
        if (q.id != id) continue;
        q.load = Queued::Load::kReady;
        q.promoted = status.ok();
      }
      --promotions_in_flight_;
    });
  }
}

absl::StatusOr<std::unique_ptr<model::SequenceState>> Engine::TakeSequence(
    const Queued& queued, int64_t capacity, int64_t* hbm_tokens, std::shared_ptr<const model::SequenceState> prefix,
    int64_t base_tokens, uint64_t* lent_by) {
  *hbm_tokens = 0;
  *lent_by = 0;
  const storage::SessionKey& key = queued.request.key;
  if (prefix == nullptr && !queued.recompute) {
    if (auto borrowed = BorrowSaving(queued, capacity, hbm_tokens, lent_by)) return borrowed;
  }
  if (hbm_ != nullptr && !queued.recompute && !queued.request.batch && hbm_->Contains(key)) {
    if (!store_->Get(key).ok()) {
      hbm_->Drop(key);  // dropped or expired meanwhile: the resident copy goes with it
    } else {
      const int64_t prompt = static_cast<int64_t>(queued.request.prompt.size());
      auto taken = hbm_->Take(key, queued.request.prompt, prompt - 1, capacity, base_tokens);
      if (!taken.ok()) return taken.status();
      if (taken->has_value()) {
        *hbm_tokens = (*taken)->tokens;
        return std::move((*taken)->seq);
      }
    }
  }
  auto make = [&] {
    return prefix != nullptr ? model_->NewSequenceOnPrefix(prefix, base_tokens, capacity - base_tokens)
                             : model_->NewSequence(capacity);
  };
  auto seq = make();
  // Room comes from resident sessions first, then from shared prompts no turn uses.
  while (!seq.ok() && absl::IsResourceExhausted(seq.status())) {
    bool freed = hbm_ != nullptr && hbm_->EvictOne();
    if (!freed) {
      MutexLock lock(&mu_);
      freed = EvictIdlePromptLocked();
    }
    if (!freed) break;
    seq = make();
  }
  return seq;
}

std::unique_ptr<Engine::Running> Engine::Start(Queued& queued) {
  const model::ModelConfig& c = config();
  const int64_t capacity = static_cast<int64_t>(queued.request.prompt.size()) + queued.request.max_new_tokens;
  if (queued.stream->cancelled()) {
    Abandon(queued, CancelStatus(*queued.stream));
    return nullptr;
  }
  if (capacity > model_->kv_capacity_tokens()) {
    // It would wait for room that never comes (and hold up the turns behind it).
    Abandon(queued, absl::ResourceExhaustedError(absl::StrCat(
                        "the turn needs KV memory for ", capacity, " tokens (prompt plus max_new_tokens); the ",
                        model_->name(), " backend holds ", model_->kv_capacity_tokens())));
    return nullptr;
  }
  // A turn on a shared prompt runs on its KV (when it is still there; else inline).
  std::shared_ptr<const model::SequenceState> prefix;
  int64_t base_tokens = 0;
  std::string base;
  if (!queued.prompt_key.empty() && !queued.prompt_job) {
    MutexLock lock(&mu_);
    auto p = prompts_.find(queued.prompt_key);
    // The instance it counted itself a user of (not one shared again after a drop since).
    if (p != prompts_.end() && p->second->state == SharedPrompt::State::kReady &&
        p->second->instance == queued.prompt_use) {
      // The whole prompt, at any length (the CUDA pool copies a partial last page's rows).
      base_tokens = static_cast<int64_t>(p->second->tokens.size());
      prefix = p->second->seq;
      // The session's base names the prompt and where its own tokens start: a record whose
      // own tokens start elsewhere (written when a CUDA sequence shared whole pages only,
      // its first rows the prompt's last) never matches.
      base = absl::StrCat(p->second->id, "@", base_tokens);
    }
  }
  const absl::Time admitted = absl::Now();  // its prefill starts: a sequence, cached KV loaded
  int64_t hbm_tokens = 0;
  uint64_t lent_by = 0;
  auto seq = TakeSequence(queued, capacity, &hbm_tokens, prefix, base_tokens, &lent_by);
  if (!seq.ok()) {
    // Waits for room where running turns or write-backs in flight hold it (they let go).
    if (absl::IsResourceExhausted(seq.status()) && (!running_.empty() || !saves_in_flight_.empty())) return nullptr;
    Abandon(queued, seq.status());
    return nullptr;
  }
  auto r = std::make_unique<Running>();
  r->seq = *std::move(seq);
  r->request = std::move(queued.request);
  r->stream = std::move(queued.stream);
  r->session_key = storage::SessionMapKey(r->request.key);
  r->tokens = r->request.prompt;
  r->rng = SplitMix64(r->request.sampling.seed);
  r->stop_filter = text::StopStringFilter(r->request.stop);
  r->prompt_job = queued.prompt_job;
  r->prompt_key = queued.prompt_key;
  r->prompt_use = queued.prompt_use;
  r->base_tokens = base_tokens;
  r->base = std::move(base);
  r->admitted = admitted;
  r->lent_by = lent_by;
  const int64_t prompt = static_cast<int64_t>(r->tokens.size());
  // The shared prompt's tokens are in its sequence already; the session's own follow.
  r->reused = base_tokens;
  if (store_ != nullptr && !queued.recompute && !r->request.batch) {
    const bool counted = metrics_ != nullptr && !r->prompt_job;  // lookups count turns' sessions
    if (counted) metrics_->lookups.Increment();
    // At least the last prompt token is computed (its logits give the first new token),
    // except by a prompt job, which samples nothing.
    const int64_t max_reuse = (r->prompt_job ? prompt : prompt - 1) - base_tokens;
    const absl::Span<const int32_t> own = absl::MakeConstSpan(r->tokens).subspan(static_cast<size_t>(base_tokens));
    // A conversation cut to fit the context window (context_window.h) may find its kept
    // tokens further on in its stored session, from before the cut.
    const int64_t cut = r->request.truncated_tokens > 0 && options_.context_window.reuse_kept_kv
                            ? r->request.kept_prefix_tokens - base_tokens
                            : -1;
    storage::PrefixMatch match = cut >= 0 ? store_->MatchAcrossCut(r->request.key, own, cut, max_reuse, r->base)
                                          : store_->Match(r->request.key, own, max_reuse, r->base);
    const int64_t hbm_own = std::max<int64_t>(0, hbm_tokens - base_tokens);
    if (hbm_own > 0 && hbm_own >= match.tokens) {
      // The KV is in the sequence already. The stored chunks hold what the store matched.
      r->reused = hbm_tokens;
      r->keep = std::min(hbm_own, match.kept);
      r->tier = storage::Tier::kHbm;
      if (counted) metrics_->hits->WithLabels({{"tier", "hbm"}}).Increment();
      if (!r->prompt_job) store_->CountReuse(r->request.key, match.tokens, hbm_own);
    } else if (match.tokens > 0) {
      // From the host tier. A resident copy (a session cut since it was kept) holds the
      // tokens before the cut where they stay; the kept run is loaded at its new positions.
      const int64_t from = std::min(hbm_own, match.kept);
      const int64_t loaded = LoadPrefix(*r, match, from);
      r->reused += loaded;
      // Stored chunks that hold only tokens before the cut stay as they are; the others are
      // written anew (re-packed at the new positions) by the write-back.
      r->keep = std::min(loaded, match.kept);
      if (loaded > from) {
        r->tier = queued.promoted ? storage::Tier::kSsd : match.tier;
        if (counted) metrics_->hits->WithLabels({{"tier", storage::TierName(r->tier)}}).Increment();
      } else if (from > 0) {
        r->tier = storage::Tier::kHbm;
        if (counted) metrics_->hits->WithLabels({{"tier", "hbm"}}).Increment();
      }
    }
  }
  if (base_tokens > 0) {
    if (r->tier == storage::Tier::kNone) r->tier = storage::Tier::kHbm;  // the prompt was in KV memory
    if (metrics_) metrics_->prompt_hits.Increment();
  }
  r->computed = r->reused;
  if (metrics_) {
    metrics_->prefill_reused.Increment(static_cast<double>(r->reused));
    metrics_->prefill_computed.Increment(static_cast<double>(prompt - r->reused));
    if (metrics_->tenants) metrics_->tenants->PromptTokens(r->request.key.tenant, prompt - r->reused, r->reused);
    metrics_->TurnStarted(*r);  // after the admission's work: it is timed
  }
  return r;
}

void Engine::Abandon(Queued& queued, const absl::Status& why) {
  if (metrics_) metrics_->TurnEnded(EndOf(why), queued);
  queued.stream->Fail(why);
  queued.stream.reset();  // ended: not to be queued again
  MutexLock lock(&mu_);
  active_sessions_.erase(storage::SessionMapKey(queued.request.key));
  LeavePromptLocked(queued.prompt_job, queued.prompt_key, queued.prompt_use, why);
}

void Engine::Requeue(std::vector<Queued> turns) {
  MutexLock lock(&mu_);
  for (auto it = turns.rbegin(); it != turns.rend(); ++it) {
    active_sessions_.erase(storage::SessionMapKey(it->request.key));
    // Admission counts it on its shared prompt again.
    if (!it->prompt_job && !it->prompt_key.empty()) ReleasePromptUseLocked(it->prompt_key, it->prompt_use);
    it->prompt_use = 0;
    queue_.push_front(std::move(*it));
  }
  lookahead_changed_ = true;
}

}  // namespace strata::engine
