#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/log.h"
#include "engine/engine_internal.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/random.h"
#include "text/stop_strings.h"

namespace strata::engine {

namespace {

// How often an idle engine looks at its write-backs in flight.
constexpr absl::Duration kSavePoll = absl::Microseconds(500);

}  // namespace

absl::Status EngineOptions::Validate() const {
  if (max_running <= 0 || max_step_tokens <= 0 || max_new_tokens_limit <= 0 || max_queued <= 0 ||
      warmup_tokens < 0 || min_shared_prompt_tokens < 0 || max_idle_shared_prompts < 0 || max_queued_per_tenant < 0 ||
      max_context < 0 || max_context == 1 || batch_reserved_running < 0 || max_running_batch < 0) {
    return absl::InvalidArgumentError("engine limits must be positive");
  }
  return context_window.Validate();
}

storage::ChunkLayout Engine::ChunkLayoutFor(const model::ModelConfig& config, int chunk_tokens) {
  return storage::ChunkLayout{.layers = config.num_layers,
                              .chunk_tokens = chunk_tokens,
                              .row_bytes = static_cast<int64_t>(config.kv_dim() * sizeof(float))};
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       std::unique_ptr<model::ModelBackend> model,
                                                       const text::Tokenizer* tokenizer,
                                                       storage::SessionStore* store,
                                                       metrics::Registry* registry) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (model == nullptr || tokenizer == nullptr) {
    return absl::InvalidArgumentError("engine needs a model and a tokenizer");
  }
  if (tokenizer->vocab_size() > model->config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer vocabulary (", tokenizer->vocab_size(),
                                                   ") exceeds the model's (", model->config().vocab_size, ")"));
  }
  if (store != nullptr) {
    storage::ChunkLayout want = model::ChunkLayoutFor(*model, store->layout().chunk_tokens);
    if (!(store->layout() == want)) {
      return absl::InvalidArgumentError("session store chunk layout does not fit the model");
    }
  }
  return std::unique_ptr<Engine>(new Engine(options, std::move(model), tokenizer, store, registry));
}

Engine::Engine(const EngineOptions& options, std::unique_ptr<model::ModelBackend> model,
               const text::Tokenizer* tokenizer, storage::SessionStore* store,
               metrics::Registry* registry)
    : options_(options), model_(std::move(model)), tokenizer_(tokenizer), store_(store) {
  context_tokens_ = options_.max_context > 0 ? std::min<int64_t>(options_.max_context, model_->config().max_context)
                                             : model_->config().max_context;
  if (registry != nullptr) {
    metrics_ = std::make_unique<Metrics>(*registry, options.metrics_tenant_label);
    ExportKvTransferMetrics(*registry, model_.get());
  }
  if (store_ != nullptr) {
    hbm_ = std::make_unique<HbmTier>(options_.hbm, model_.get(), registry);
    if (absl::Status s = model_->RegisterHostMemory(store_->host_arena()); !s.ok()) {
      LOG(WARNING) << "the host tier could not be pinned for DMA; KV loads and saves go through staging copies: "
                   << s;
    }
    // The first write-back would allocate the backend's save staging on the engine thread,
    // between two steps: done here instead.
    if (absl::Status s = model_->PrepareKvSaves(store_->layout()); !s.ok()) {
      LOG(WARNING) << "the save staging is allocated at the first write-back instead: " << s;
    }
  }
  if (options_.warmup_tokens > 0) Warmup();
  loop_ = std::thread([this] { Loop(); });
}

void Engine::Warmup() {
  const model::ModelConfig& c = config();
  const int64_t n = std::min<int64_t>(
      {options_.warmup_tokens, options_.max_step_tokens, context_tokens_, model_->kv_capacity_tokens()});
  auto seq = model_->NewSequence(n);
  if (!seq.ok()) return;  // no room: the speed is measured by the first turns instead
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(i % c.vocab_size);
  double seconds = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the first pays for cold caches and library set-up
    model::ForwardEntry e{seq->get(), 0, tokens};
    const absl::Time start = absl::Now();
    if (absl::Status s = model_->Forward({&e, 1}); !s.ok()) {
      LOG(WARNING) << "the warm-up step failed: " << s;
      return;
    }
    seconds = absl::ToDoubleSeconds(absl::Now() - start);
  }
  MutexLock lock(&mu_);
  if (seconds > 0) stats_.prefill_tokens_per_second = static_cast<double>(n) / seconds;
}

Engine::~Engine() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  loop_.join();
  MutexLock lock(&mu_);
  // Promotion callbacks touch the queue: wait for those in flight.
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return promotions_in_flight_ == 0; });
  for (Queued& q : queue_) {
    if (metrics_) metrics_->TurnEnded(TurnEnd::kShutdown, q);
    q.stream->Fail(absl::UnavailableError("the server is shutting down"));
  }
  queue_.clear();
}

absl::StatusOr<std::shared_ptr<TurnStream>> Engine::Submit(TurnRequest request) {
  const int64_t window = context_tokens_;
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt == 0) return absl::InvalidArgumentError("the conversation is empty");
  // One pass, the vocabulary size read once (a long conversation is resent every turn).
  const int32_t vocab = tokenizer_->vocab_size();
  const auto outside = std::find_if(request.prompt.begin(), request.prompt.end(), [vocab](int32_t t) {
    return static_cast<uint32_t>(t) >= static_cast<uint32_t>(vocab);  // negatives wrap past it
  });
  if (outside != request.prompt.end()) {
    const size_t i = static_cast<size_t>(outside - request.prompt.begin());
    return absl::InvalidArgumentError(
        absl::StrCat("token_ids[", i, "] = ", *outside, " is outside the vocabulary [0, ", vocab, ")"));
  }
  if (prompt >= window) {
    return absl::InvalidArgumentError(absl::StrCat("the conversation is ", prompt,
                                                   " tokens; the model's context holds ",
                                                   window, " (prompt plus at least one new token)"));
  }
  if (request.truncated_tokens < 0 || request.kept_prefix_tokens < 0 || request.kept_prefix_tokens >= prompt) {
    return absl::InvalidArgumentError("a cut conversation's kept prefix must lie inside the conversation");
  }
  if (request.system_tokens < 0 || request.system_tokens >= prompt) {
    return absl::InvalidArgumentError(absl::StrCat("the system part (", request.system_tokens,
                                                   " tokens) must be shorter than the conversation (", prompt, ")"));
  }
  if (request.max_new_tokens < 1 || request.max_new_tokens > options_.max_new_tokens_limit) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be in 1..",
                                                   options_.max_new_tokens_limit, ", got ",
                                                   request.max_new_tokens));
  }
  const SamplingOptions& s = request.sampling;
  if (!std::isfinite(s.temperature) || s.temperature < 0) {
    return absl::InvalidArgumentError("temperature must be a finite number >= 0");
  }
  if (!std::isfinite(s.top_p) || s.top_p < 0 || s.top_p > 1) {
    return absl::InvalidArgumentError("top_p must be in [0, 1]");
  }
  if (static_cast<int>(request.stop.size()) > options_.max_stop_strings) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", options_.max_stop_strings, " stop strings"));
  }
  for (const std::string& stop : request.stop) {
    if (stop.empty() || static_cast<int>(stop.size()) > options_.max_stop_string_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("stop strings must be 1..",
                                                     options_.max_stop_string_bytes, " bytes"));
    }
  }
  // The context bounds the answer: the prompt and the new tokens must fit.
  request.max_new_tokens = static_cast<int>(
      std::min<int64_t>(request.max_new_tokens, window - prompt));

  auto stream = std::make_shared<TurnStream>();
  MutexLock lock(&mu_);
  if (stopping_ || draining_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int>(queue_.size()) >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat("the queue holds ", queue_.size(),
                                                     " turns; try again later"));
  }
  if (options_.max_queued_per_tenant > 0) {
    const int64_t mine = std::count_if(queue_.begin(), queue_.end(), [&](const Queued& q) {
      return !q.prompt_job && q.request.key.tenant == request.key.tenant;
    });
    if (mine >= options_.max_queued_per_tenant) {
      return absl::ResourceExhaustedError(absl::StrCat("tenant '", request.key.tenant, "' has ", mine,
                                                       " turns queued, its limit (--max_queued_per_tenant); try "
                                                       "again later"));
    }
  }
  if (metrics_ && request.truncated_tokens > 0) {
    metrics_->truncations.Increment();
    metrics_->truncated_tokens.Increment(static_cast<double>(request.truncated_tokens));
  }
  queue_.push_back(Queued{std::move(request), stream, next_id_++});
  lookahead_changed_ = true;
  if (metrics_) metrics_->queue_depth.Set(static_cast<double>(queue_.size()));
  return stream;
}

EngineStats Engine::Stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

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
    if (p != prompts_.end() && p->second->state == SharedPrompt::State::kReady) {
      // A paged backend shares whole pages: the prompt's last partial page is computed
      // with the session's own tokens.
      const int64_t grain = std::max<int64_t>(1, model_->prefix_granularity());
      base_tokens = static_cast<int64_t>(p->second->tokens.size()) / grain * grain;
      if (base_tokens > 0) {
        prefix = p->second->seq;
        base = p->second->id;
      }
    }
  }
  const absl::Time admitted = absl::Now();  // its prefill starts: a sequence, cached KV loaded
  int64_t hbm_tokens = 0;
  uint64_t lent_by = 0;
  auto seq = TakeSequence(queued, capacity, &hbm_tokens, prefix, base_tokens, &lent_by);
  if (!seq.ok()) {
    if (absl::IsResourceExhausted(seq.status()) && !running_.empty()) return nullptr;  // waits for room
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

void Engine::Loop() {
  for (;;) {
    ReleaseSaves(/*wait=*/false);
    std::vector<Queued> admitted;
    std::vector<Promotion> promote;
    {
      MutexLock lock(&mu_);
      if (running_.empty()) {
        // Idle: sleep until a turn can start. (The condition reads only guarded state: absl
        // may evaluate it on another thread.) With write-backs in flight, wake every
        // kSavePoll to see them land: a session's next turn may wait for one (or borrow its
        // sequence at once), and the thread is never held by a copy.
        auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || std::any_of(queue_.begin(), queue_.end(), [](const Queued& q) {
                   return q.load != Queued::Load::kPromoting && !q.prompt_waiting;
                 });
        };
        if (saves_in_flight_.empty()) {
          mu_.Await(has_work);
        } else {
          (void)mu_.AwaitWithTimeout(has_work, kSavePoll);
        }
      }
      if (stopping_) break;
      admitted = AdmitLocked(&promote);
      if (!admitted.empty()) lookahead_changed_ = true;
      if (metrics_) metrics_->queue_depth.Set(static_cast<double>(queue_.size()));
    }
    StartPromotions(std::move(promote));
    PublishLookAhead();
    std::vector<Queued> waiting;
    std::vector<Running*> loaded;  // turns whose history this round loads from the host tier
    for (Queued& q : admitted) {
      if (!waiting.empty()) {
        if (q.stream->cancelled()) {
          Abandon(q, CancelStatus(*q.stream));
        } else {
          waiting.push_back(std::move(q));  // keeps the queue's order
        }
        continue;
      }
      std::unique_ptr<Running> r = Start(q);
      if (r != nullptr) {
        if (r->reused > 0 && r->tier != storage::Tier::kHbm) loaded.push_back(r.get());
        running_.push_back(std::move(r));
      } else if (q.stream != nullptr) {
        if (metrics_) metrics_->kv_waits.Increment();
        waiting.push_back(std::move(q));  // no KV memory for it yet
      }
    }
    if (!waiting.empty()) Requeue(std::move(waiting));
    StartLoads(loaded);
    // Nothing runs, and the queued turns wait for their sessions' write-backs: poll them
    // without spinning.
    if (running_.empty() && !saves_in_flight_.empty()) absl::SleepFor(kSavePoll);
    Step();
    ReleaseLoads(/*wait=*/false);
    ReleaseSaves(/*wait=*/false);
  }
  ReleaseSaves(/*wait=*/true);
  ReleaseLoads(/*wait=*/true);
  for (auto& r : running_) {
    if (metrics_) metrics_->TurnEnded(TurnEnd::kShutdown, *r);
    r->stream->Fail(absl::UnavailableError("the server is shutting down"));
  }
  running_.clear();
}

void Engine::Abandon(Queued& queued, const absl::Status& why) {
  if (metrics_) metrics_->TurnEnded(EndOf(why), queued);
  queued.stream->Fail(why);
  queued.stream.reset();  // ended: not to be queued again
  MutexLock lock(&mu_);
  active_sessions_.erase(storage::SessionMapKey(queued.request.key));
  LeavePromptLocked(queued.prompt_job, queued.prompt_key, why);
}

void Engine::Requeue(std::vector<Queued> turns) {
  MutexLock lock(&mu_);
  for (auto it = turns.rbegin(); it != turns.rend(); ++it) {
    active_sessions_.erase(storage::SessionMapKey(it->request.key));
    // Admission counts it on its shared prompt again.
    if (!it->prompt_job && !it->prompt_key.empty()) ReleasePromptUseLocked(it->prompt_key);
    queue_.push_front(std::move(*it));
  }
  lookahead_changed_ = true;
}

void Engine::Step() {
  // Cancelled turns leave first; what they computed is still saved.
  for (auto& r : running_) {
    if (r->stream->cancelled()) End(*r, FinishReason::kCancelled);
    // A prompt job whose KV was all loaded from the store has nothing to compute.
    if (r->prompt_job && r->seq != nullptr && r->computed == static_cast<int64_t>(r->tokens.size())) {
      FinishPromptJob(*r);
    }
  }
  std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return r->seq == nullptr; });
  if (running_.empty()) return;

  // Decodes first (one token each), then prompt chunks within the step's token budget:
  // chat turns' before batch turns'.
  int budget = options_.max_step_tokens;
  std::vector<model::ForwardEntry> batch;
  std::vector<Running*> in_batch;
  for (int pass = 0; pass < 3; ++pass) {
    for (auto& rp : running_) {
      Running& r = *rp;
      const int64_t pending = static_cast<int64_t>(r.tokens.size()) - r.computed;
      const bool decoding = r.computed >= static_cast<int64_t>(r.request.prompt.size());
      if ((pass == 0) != decoding || (pass == 2) != (!decoding && r.request.batch) || pending <= 0 || budget <= 0) {
        continue;
      }
      int n = static_cast<int>(std::min<int64_t>(pending, budget));
      budget -= n;
      r.step_tokens = n;
      const bool last = r.computed + n == static_cast<int64_t>(r.tokens.size());
      model::ForwardEntry entry{r.seq.get(), r.computed, absl::Span<const int32_t>(r.tokens.data() + r.computed, n)};
      if (last && !r.prompt_job) {
        // One uniform draw per sampled token, in order: the same sequence whatever the backend.
        const SamplingOptions& s = r.request.sampling;
        entry.token = &r.next_token;
        entry.sampling = model::TokenSampling{s.temperature, s.top_p, s.temperature > 0 ? r.rng.Uniform() : 0.0};
      }
      batch.push_back(entry);
      in_batch.push_back(&r);
    }
  }
  int64_t prefill_tokens = 0;
  for (Running* r : in_batch) {
    if (r->computed < static_cast<int64_t>(r->request.prompt.size())) prefill_tokens += r->step_tokens;
  }
  const absl::Time step_start = absl::Now();
  if (absl::Status s = model_->Forward(batch); !s.ok()) {
    // A backend fault: the turns in the step cannot go on; nothing of them is saved.
    LOG(ERROR) << "forward step failed: " << s;
    for (Running* r : in_batch) {
      if (metrics_) metrics_->TurnEnded(TurnEnd::kError, *r);
      r->stream->Fail(absl::InternalError(absl::StrCat("the model step failed: ", s.message())));
      ReleaseSequence(*r);
      MutexLock lock(&mu_);
      active_sessions_.erase(r->session_key);
      LeavePromptLocked(r->prompt_job, r->prompt_key, s);
    }
    std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return r->seq == nullptr; });
    return;
  }
  const double step_seconds = absl::ToDoubleSeconds(absl::Now() - step_start);
  {
    MutexLock lock(&mu_);
    ++stats_.steps;
    if (prefill_tokens >= 16 && step_seconds > 0) {
      const double rate = static_cast<double>(prefill_tokens) / step_seconds;
      double& ewma = stats_.prefill_tokens_per_second;
      ewma = ewma == 0 ? rate : 0.8 * ewma + 0.2 * rate;
    }
    stats_.max_batch_turns = std::max<int64_t>(stats_.max_batch_turns, static_cast<int64_t>(batch.size()));
  }
  if (metrics_) metrics_->batch_size.Observe(static_cast<double>(batch.size()));
  for (Running* r : in_batch) {
    r->computed += r->step_tokens;
    if (r->computed != static_cast<int64_t>(r->tokens.size())) continue;
    if (r->prompt_job) {
      FinishPromptJob(*r);
    } else {
      AfterStep(*r);
    }
  }
  std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return r->seq == nullptr; });
  // After the finished turns are gone: an idle server reads 0.
  if (metrics_) metrics_->running.Set(static_cast<double>(running_.size()));
}

bool Engine::AfterStep(Running& r) {
  const int32_t token = r.next_token;
  ++r.generated;
  if (metrics_) metrics_->generated.Increment();
  const absl::Time now = absl::Now();
  if (!r.first_token_sent) {
    r.first_token_sent = true;
    r.first_token = now;
    r.ttft_ms = absl::ToDoubleMilliseconds(now - r.request.arrival);
    if (metrics_) metrics_->FirstToken(r);
  } else if (metrics_) {
    metrics_->inter_token.Observe(absl::ToDoubleSeconds(now - r.last_token));
  }
  r.last_token = now;
  const bool stop_token = tokenizer_->IsStopToken(token);
  std::string text = stop_token ? std::string() : r.utf8.Feed(tokenizer_->TokenBytes(token));
  if (!r.text_started && !text.empty()) {
    r.text_started = true;
    if (text[0] == ' ' && tokenizer_->DropsLeadingSpace()) text.erase(0, 1);
  }
  std::string visible = r.stop_filter.Feed(text);
  const bool length = r.generated >= r.request.max_new_tokens;
  if (stop_token || r.stop_filter.stopped() || length) {
    if (!r.stop_filter.stopped()) visible += r.stop_filter.Feed(r.utf8.Flush());
    if (!r.stop_filter.stopped()) visible += r.stop_filter.Flush();
    r.stream->PushDelta({&token, 1}, visible);
    End(r, (stop_token || r.stop_filter.stopped()) ? FinishReason::kStop : FinishReason::kLength);
    return true;
  }
  r.stream->PushDelta({&token, 1}, visible);
  r.tokens.push_back(token);  // fed in the next step
  return false;
}

void Engine::Drain() {
  MutexLock lock(&mu_);
  draining_ = true;
}

bool Engine::AwaitIdle(absl::Duration timeout) {
  MutexLock lock(&mu_);
  // A session is active from admission until its write-back completes.
  return mu_.AwaitWithTimeout(
      [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && active_sessions_.empty(); }, timeout);
}

}  // namespace strata::engine
