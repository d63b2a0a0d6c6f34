#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/log.h"
#include "engine/engine_internal.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "text/stop_strings.h"

namespace strata::engine {

namespace {

// How often an idle engine looks at its write-backs in flight.
constexpr absl::Duration kSavePoll = absl::Microseconds(500);

}  // namespace

absl::Status EngineOptions::Validate() const {
  if (max_running <= 0 || max_step_tokens <= 0 || max_new_tokens_limit <= 0 || max_queued <= 0 ||
      warmup_tokens < 0 || min_shared_prompt_tokens < 0 || max_idle_shared_prompts < 0 || max_queued_per_tenant < 0 ||
      max_context < 0 || max_context == 1 || batch_reserved_running < 0 || max_running_batch < 0 ||
      stream_wake_threads < 0 || stream_wake_threads > 64) {
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
    if (store_ != nullptr) ExportStoredPromptMetrics(*registry, store_);
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
  if (options_.stream_wake_threads > 0) waker_ = std::make_unique<StreamWaker>(options_.stream_wake_threads);
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

double Engine::Lap(LoopPart part) {
  const absl::Time now = absl::Now();
  const double seconds = absl::ToDoubleSeconds(now - last_lap_);
  last_lap_ = now;
  if (metrics_) metrics_->thread_parts[static_cast<int>(part)]->Increment(seconds);
  return seconds;
}

void Engine::Loop() {
  last_lap_ = absl::Now();
  for (;;) {
    ReleaseSaves(/*wait=*/false);
    Lap(LoopPart::kRelease);
    std::vector<Queued> admitted;
    std::vector<Promotion> promote;
    std::vector<storage::SessionKey> touch;
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
        Lap(LoopPart::kIdle);
      }
      if (stopping_) break;
      admitted = AdmitLocked(&promote);
      touch.swap(prompts_to_touch_);
      if (!admitted.empty()) lookahead_changed_ = true;
      if (metrics_) metrics_->queue_depth.Set(static_cast<double>(queue_.size()));
    }
    StartPromotions(std::move(promote));
    for (const storage::SessionKey& key : touch) store_->Touch(key);
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
    if (running_.empty() && !saves_in_flight_.empty()) {
      Lap(LoopPart::kSchedule);
      absl::SleepFor(kSavePoll);
      Lap(LoopPart::kIdle);
    }
    Step();
    ReleaseLoads(/*wait=*/false);
    ReleaseSaves(/*wait=*/false);
    Lap(LoopPart::kRelease);
  }
  ReleaseSaves(/*wait=*/true);
  ReleaseLoads(/*wait=*/true);
  for (auto& r : running_) {
    if (metrics_) metrics_->TurnEnded(TurnEnd::kShutdown, *r);
    r->stream->Fail(absl::UnavailableError("the server is shutting down"));
  }
  running_.clear();
}

void Engine::Step() {
  // Cancelled turns leave first; what they computed is still saved.
  for (auto& r : running_) {
    if (r->stream->cancelled()) {
      Lap(LoopPart::kSchedule);
      End(*r, FinishReason::kCancelled);
      Lap(LoopPart::kFinish);
    }
    // A prompt job whose KV was all loaded from the store has nothing to compute.
    if (r->prompt_job && r->seq != nullptr && r->computed == static_cast<int64_t>(r->tokens.size())) {
      FinishPromptJob(*r);
    }
  }
  std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return r->seq == nullptr; });
  if (running_.empty()) {
    Lap(LoopPart::kSchedule);
    return;
  }

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
  int64_t prefill_tokens = 0, decodes = 0;
  for (Running* r : in_batch) {
    if (r->computed < static_cast<int64_t>(r->request.prompt.size())) {
      prefill_tokens += r->step_tokens;
    } else {
      ++decodes;
    }
  }
  Lap(LoopPart::kSchedule);
  const absl::Status forward = model_->Forward(batch);
  const double step_seconds = Lap(LoopPart::kForward);
  if (!forward.ok()) {
    // A backend fault: the turns in the step cannot go on; nothing of them is saved.
    LOG(ERROR) << "forward step failed: " << forward;
    for (Running* r : in_batch) {
      if (metrics_) metrics_->TurnEnded(TurnEnd::kError, *r);
      r->stream->Fail(absl::InternalError(absl::StrCat("the model step failed: ", forward.message())));
      ReleaseSequence(*r);
      MutexLock lock(&mu_);
      active_sessions_.erase(r->session_key);
      LeavePromptLocked(r->prompt_job, r->prompt_key, r->prompt_use, forward);
    }
    std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return r->seq == nullptr; });
    Lap(LoopPart::kEmit);
    return;
  }
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
  if (metrics_) {
    metrics_->batch_size.Observe(static_cast<double>(batch.size()));
    const bool all_decodes = decodes == static_cast<int64_t>(in_batch.size());
    (decodes == 0 ? metrics_->step_prefill : all_decodes ? metrics_->step_decode : metrics_->step_mixed)
        ->Observe(step_seconds);
  }
  for (Running* r : in_batch) {
    r->computed += r->step_tokens;
    if (r->computed != static_cast<int64_t>(r->tokens.size())) continue;
    if (r->prompt_job) {
      Lap(LoopPart::kEmit);
      FinishPromptJob(*r);
      Lap(LoopPart::kFinish);
    } else {
      AfterStep(*r);
    }
  }
  if (!to_wake_.empty()) waker_->Wake(std::exchange(to_wake_, {}));
  std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return r->seq == nullptr; });
  // After the finished turns are gone: an idle server reads 0.
  if (metrics_) metrics_->running.Set(static_cast<double>(running_.size()));
  Lap(LoopPart::kEmit);
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
    Lap(LoopPart::kEmit);
    End(r, (stop_token || r.stop_filter.stopped()) ? FinishReason::kStop : FinishReason::kLength);
    Lap(LoopPart::kFinish);
    return true;
  }
  r.stream->PushDelta({&token, 1}, visible, /*wake=*/waker_ == nullptr);
  if (waker_ != nullptr) to_wake_.push_back(r.stream);
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
