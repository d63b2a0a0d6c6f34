// Shared system prompts on the engine thread: a prompt's KV is brought into KV memory once
// by a prompt job (loaded when the store holds it, else computed, then saved once), the
// turns on it wait in the queue until it is there and then run on it, and the registry
// (Register, Drop, List) that the API reaches.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/system_prompt_names.h"

namespace strata::engine {
namespace {

// A prompt whose job failed is computed inline by its turns for this long, then tried again.
constexpr absl::Duration kPromptRetry = absl::Seconds(30);

}  // namespace

bool Engine::SharesSystemPrompt(int64_t tokens) const {
  return store_ != nullptr && model_->shares_prefixes() && options_.min_shared_prompt_tokens > 0 &&
         tokens >= options_.min_shared_prompt_tokens;
}

Engine::Queued Engine::PromptJobLocked(const storage::SessionKey& key, std::vector<int32_t> tokens) {
  Queued job;
  job.request.key = key;
  job.request.prompt = std::move(tokens);
  job.request.max_new_tokens = 0;
  job.stream = std::make_shared<TurnStream>();  // nobody reads it
  job.id = next_id_++;
  job.prompt_job = true;
  job.prompt_key = storage::SessionMapKey(key);
  lookahead_changed_ = true;
  return job;
}

Engine::SharedPrompt& Engine::WantPromptLocked(const storage::SessionKey& key, std::string id,
                                               std::vector<int32_t> tokens, std::vector<Queued>* jobs) {
  std::unique_ptr<SharedPrompt>& slot = prompts_[storage::SessionMapKey(key)];
  if (slot == nullptr) {
    slot = std::make_unique<SharedPrompt>();
    slot->id = std::move(id);
    slot->key = key;
    slot->tokens = std::move(tokens);
    slot->instance = ++prompt_instances_;
  }
  slot->state = SharedPrompt::State::kWanted;
  jobs->push_back(PromptJobLocked(slot->key, slot->tokens));
  return *slot;
}

bool Engine::PromptReadyLocked(Queued& q, std::vector<Queued>* jobs) {
  if (q.prompt_job) return true;
  // A batch turn's system part is its group's prefix, planned to be shared; with nothing to
  // share it on (the backend computes prefixes per sequence) it is computed inline.
  const bool shared = q.request.batch ? model_->shares_prefixes() && q.request.system_tokens > 0
                                      : SharesSystemPrompt(q.request.system_tokens);
  if (!shared) return true;
  // Computed inline with the turn, as without sharing.
  auto inline_prompt = [&q] {
    q.prompt_key.clear();
    q.request.system_tokens = 0;
    return true;
  };
  const absl::Span<const int32_t> system =
      absl::MakeConstSpan(q.request.prompt).subspan(0, static_cast<size_t>(q.request.system_tokens));
  std::string id;  // hashed once per turn, when first checked
  if (q.prompt_key.empty()) {
    id = SystemPromptId(system);
    q.prompt_key = storage::SessionMapKey(SystemPromptKey(q.request.key.tenant, id));
  }
  auto it = prompts_.find(q.prompt_key);
  if (it == prompts_.end()) {
    if (auto dropped = prompt_dropped_at_.find(q.prompt_key); dropped != prompt_dropped_at_.end()) {
      // Sent before its prompt was dropped: the prompt stays gone.
      if (q.request.arrival <= dropped->second) return inline_prompt();
      prompt_dropped_at_.erase(dropped);
    }
    if (id.empty()) id = SystemPromptId(system);
    const storage::SessionKey key = SystemPromptKey(q.request.key.tenant, id);
    WantPromptLocked(key, std::move(id), std::vector<int32_t>(system.begin(), system.end()), jobs)
        .ephemeral = q.request.batch;
    it = prompts_.find(q.prompt_key);
  }
  SharedPrompt& p = *it->second;
  if (!q.request.batch) p.ephemeral = false;
  switch (p.state) {
    case SharedPrompt::State::kReady:
      ++p.users;
      q.prompt_use = p.instance;
      p.last_use = ++prompt_clock_;
      if (!p.ephemeral) prompts_to_touch_.push_back(p.key);  // its stored copy is in use too
      return true;
    case SharedPrompt::State::kWanted:
      q.prompt_waiting = true;
      return false;
    case SharedPrompt::State::kFailed:
      if (absl::Now() - p.failed_at <= kPromptRetry) return inline_prompt();
      WantPromptLocked(p.key, p.id, p.tokens, jobs);
      q.prompt_waiting = true;
      return false;
  }
  return true;
}

void Engine::FinishPromptJob(Running& r) {
  // Turns on the prompt read its KV from their first step: what was loaded from the store
  // must have landed (a device backend's loads otherwise only order this sequence's steps).
  if (r.reused > 0) {
    if (absl::Status s = model_->FinishKvTransfers(); !s.ok()) {
      MutexLock lock(&mu_);
      FailPromptJobLocked(r.prompt_key, s);
      active_sessions_.erase(r.session_key);
      r.seq.reset();
      return;
    }
  }
  std::shared_ptr<model::SequenceState> seq(std::move(r.seq));  // the turn has ended
  bool wanted;
  bool ephemeral = false;
  absl::Time decided;
  {
    MutexLock lock(&mu_);
    decided = absl::Now();
    auto it = prompts_.find(r.prompt_key);
    wanted = it != prompts_.end() && it->second->state == SharedPrompt::State::kWanted;
    if (wanted) {
      ephemeral = it->second->ephemeral;
      SharedPrompt& p = *it->second;
      p.state = SharedPrompt::State::kReady;
      p.seq = seq;
      p.last_use = ++prompt_clock_;
      if (metrics_) {
        const bool stored = r.reused == static_cast<int64_t>(r.tokens.size());
        metrics_->prompt_loads->WithLabels({{"source", stored ? "stored" : "computed"}}).Increment();
      }
      LOG_EVERY_N_SEC(INFO, 10) << "shared system prompt " << p.id << " of tenant '" << p.key.tenant << "' ("
                                << p.tokens.size() << " tokens) is in KV memory: " << r.reused << " tokens loaded, "
                                << r.tokens.size() - r.reused << " computed";
    }
    // Its turns go on (on it, or inline when it was dropped meanwhile).
    for (Queued& q : queue_) {
      if (q.prompt_key == r.prompt_key) q.prompt_waiting = false;
    }
    TrimIdlePromptsLocked();
    PublishPromptGaugesLocked();
  }
  // Stored once: saved unless all of it came from the store (or it was dropped meanwhile);
  // a batch group's prefix lives in KV memory only. A drop from here on is undone when the
  // save lands (DropPromptSavedAfterItsDrop).
  if (wanted && before_prompt_save_) before_prompt_save_();
  const bool saving = wanted && !ephemeral && r.reused < static_cast<int64_t>(r.tokens.size()) && StartSave(r, seq);
  if (saving) {
    saves_in_flight_.back().started = decided;
    return;  // its store session stays active until the write-back completes
  }
  MutexLock lock(&mu_);
  active_sessions_.erase(r.session_key);
}

void Engine::FailPromptJobLocked(const std::string& prompt_key, const absl::Status& why) {
  auto it = prompts_.find(prompt_key);
  if (it != prompts_.end() && it->second->state == SharedPrompt::State::kWanted) {
    LOG(WARNING) << "shared system prompt " << it->second->id << " could not be brought into KV memory; its turns "
                 << "compute it inline for now: " << why;
    it->second->state = SharedPrompt::State::kFailed;
    it->second->failed_at = absl::Now();
  }
  for (Queued& q : queue_) {
    if (q.prompt_key == prompt_key) q.prompt_waiting = false;
  }
}

void Engine::LeavePromptLocked(bool prompt_job, const std::string& prompt_key, uint64_t use,
                               const absl::Status& why) {
  if (prompt_job) {
    FailPromptJobLocked(prompt_key, why);
  } else if (!prompt_key.empty()) {
    ReleasePromptUseLocked(prompt_key, use);
  }
}

void Engine::ReleasePromptUseLocked(const std::string& prompt_key, uint64_t use) {
  auto it = prompts_.find(prompt_key);
  // A prompt dropped while the turn ran, and perhaps shared again since, counts it no more.
  if (it == prompts_.end() || it->second->instance != use || it->second->users == 0) return;
  --it->second->users;
  TrimIdlePromptsLocked();
  PublishPromptGaugesLocked();
}

bool Engine::EvictIdlePromptLocked(const absl::flat_hash_set<std::string_view>* keep) {
  auto victim = prompts_.end();
  for (auto it = prompts_.begin(); it != prompts_.end(); ++it) {
    const SharedPrompt& p = *it->second;
    if (p.state != SharedPrompt::State::kReady || p.users > 0) continue;
    if (keep != nullptr && keep->contains(it->first)) continue;
    if (victim == prompts_.end() || p.last_use < victim->second->last_use) victim = it;
  }
  if (victim == prompts_.end()) return false;
  // Sequences of sessions resident in HBM that were on it keep its KV until they go.
  prompts_.erase(victim);
  PublishPromptGaugesLocked();
  return true;
}

void Engine::TrimIdlePromptsLocked() {
  int ready_unused = 0;
  for (const auto& [k, p] : prompts_) ready_unused += p->state == SharedPrompt::State::kReady && p->users == 0;
  if (ready_unused <= options_.max_idle_shared_prompts) return;  // (a turn's end: the queue is not read)
  // A prompt that queued turns wait for is not idle: it was brought in for them (with
  // max_idle_shared_prompts at 0 it would go again before they start, and come back).
  absl::flat_hash_set<std::string_view> wanted;
  for (const Queued& q : queue_) {
    if (!q.prompt_key.empty()) wanted.insert(q.prompt_key);
  }
  int idle = 0;
  for (const auto& [k, p] : prompts_) {
    idle += p->state == SharedPrompt::State::kReady && p->users == 0 && !wanted.contains(k);
  }
  for (; idle > options_.max_idle_shared_prompts && EvictIdlePromptLocked(&wanted); --idle) {
  }
}

void Engine::PublishPromptGaugesLocked() {
  if (!metrics_) return;
  int64_t resident = 0, tokens = 0;
  for (const auto& [k, p] : prompts_) {
    if (p->state != SharedPrompt::State::kReady) continue;
    ++resident;
    tokens += static_cast<int64_t>(p->tokens.size());
  }
  metrics_->prompts_resident.Set(static_cast<double>(resident));
  metrics_->prompt_bytes.Set(static_cast<double>(tokens * model_->kv_bytes_per_token()));
}

absl::StatusOr<std::string> Engine::RegisterSystemPrompt(const std::string& tenant, std::vector<int32_t> tokens) {
  if (store_ == nullptr) {
    return absl::FailedPreconditionError("the session cache is off: system prompts cannot be shared");
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return absl::InvalidArgumentError("the system prompt is empty");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= tokenizer_->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token_ids[", i, "] = ", tokens[i],
                                                     " is outside the vocabulary [0, ", tokenizer_->vocab_size(), ")"));
    }
  }
  if (n + 1 >= context_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("the system prompt is ", n, " tokens; the model's context holds ",
                                                   context_tokens_, " (the prompt, a message and an answer)"));
  }
  std::string id = SystemPromptId(tokens);
  const storage::SessionKey key = SystemPromptKey(tenant, id);
  const std::string map_key = storage::SessionMapKey(key);
  MutexLock lock(&mu_);
  if (stopping_ || draining_) return absl::UnavailableError("the server is shutting down");
  if (!SharesSystemPrompt(n)) return id;  // too short to share, or nothing shares prefixes
  prompt_dropped_at_.erase(map_key);
  auto it = prompts_.find(map_key);
  if (it != prompts_.end() && it->second->ephemeral && it->second->state == SharedPrompt::State::kReady) {
    // Built for a batch, held in KV memory only. Registered, it is stored too: brought in
    // anew by a prompt job that saves it (the batch's turns keep the instance they run on).
    prompts_.erase(it);
    it = prompts_.end();
    PublishPromptGaugesLocked();
  }
  if (it != prompts_.end() && it->second->state != SharedPrompt::State::kFailed) {
    it->second->ephemeral = false;  // registered: it lasts (a job in flight saves it)
    return id;
  }
  std::vector<Queued> jobs;
  WantPromptLocked(key, id, std::move(tokens), &jobs).ephemeral = false;  // (a batch's that failed too)
  queue_.push_back(std::move(jobs.front()));
  return id;
}

absl::Status Engine::DropSystemPrompt(const std::string& tenant, const std::string& id, bool known) {
  const storage::SessionKey key = SystemPromptKey(tenant, id);
  const std::string map_key = storage::SessionMapKey(key);
  absl::Time now;
  bool found = false;
  std::optional<absl::Time> dropped_before;  // the drop remembered before this one, if any
  {
    MutexLock lock(&mu_);
    now = absl::Now();  // under the lock: ordered with a prompt job's decision to save
    // Turns running on it hold its KV through their sequences until they end.
    found = prompts_.erase(map_key) > 0;
    // Remembered with the erase, also where only the store may hold it (its stored copy is
    // looked for below, outside the lock): no turn that arrived before the drop brings it
    // back in between.
    if (auto d = prompt_dropped_at_.find(map_key); d != prompt_dropped_at_.end()) dropped_before = d->second;
    RememberPromptDropLocked(map_key, now);
    if (found) PublishPromptGaugesLocked();
  }
  if (store_ != nullptr && store_->Get(key).ok() && store_->Drop(key).ok()) found = true;
  if (found) return absl::OkStatus();
  // An unknown id changes nothing (one the caller registered stays remembered).
  if (!known) {
    MutexLock lock(&mu_);
    if (dropped_before.has_value()) {
      prompt_dropped_at_[map_key] = *dropped_before;
    } else {
      prompt_dropped_at_.erase(map_key);
    }
  }
  return absl::NotFoundError(absl::StrCat("no system prompt '", id, "'"));
}

void Engine::RememberPromptDropLocked(const std::string& map_key, absl::Time when) {
  // Turns that arrived before the drop compute the prompt inline rather than bring it back
  // (PromptReadyLocked). No queued turn is older than the oldest queued, and a turn is
  // stamped before it is queued (a batch's items at the batch's start, submitted as it
  // goes): drops older than both the oldest and an hour are forgotten.
  absl::Time oldest = when - absl::Hours(1);
  for (const Queued& q : queue_) oldest = std::min(oldest, q.request.arrival);
  for (auto it = prompt_dropped_at_.begin(); it != prompt_dropped_at_.end();) {
    if (it->second < oldest) {
      prompt_dropped_at_.erase(it++);
    } else {
      ++it;
    }
  }
  prompt_dropped_at_[map_key] = when;
}

void Engine::DropPromptSavedAfterItsDrop(const SaveInFlight& f) {
  if (!SystemPromptIdOfSession(f.key.session_id).has_value()) return;
  bool dropped;
  {
    MutexLock lock(&mu_);
    auto d = prompt_dropped_at_.find(f.session_key);
    dropped = d != prompt_dropped_at_.end() && d->second >= f.started;
  }
  if (dropped && store_->Drop(f.key).ok()) {
    LOG(INFO) << "shared system prompt " << f.key.session_id.substr(1) << " was dropped while its save started; "
              << "the save is dropped too";
  }
}

size_t Engine::RememberedPromptDropsForTesting() const {
  MutexLock lock(&mu_);
  return prompt_dropped_at_.size();
}

bool Engine::ReleaseBatchPrefix(const std::string& tenant, absl::Span<const int32_t> tokens) {
  const std::string map_key = storage::SessionMapKey(SystemPromptKey(tenant, SystemPromptId(tokens)));
  MutexLock lock(&mu_);
  auto it = prompts_.find(map_key);
  if (it == prompts_.end() || !it->second->ephemeral || it->second->users > 0 ||
      it->second->state == SharedPrompt::State::kWanted) {
    return false;
  }
  if (std::any_of(queue_.begin(), queue_.end(), [&](const Queued& q) { return q.prompt_key == map_key; })) return false;
  // Turns that ran on it hold its KV through their sequences until they go.
  prompts_.erase(it);
  PublishPromptGaugesLocked();
  return true;
}

std::vector<Engine::SystemPromptInfo> Engine::ListSystemPrompts(const std::string& tenant) const {
  std::vector<SystemPromptInfo> out;
  if (store_ != nullptr) {
    for (const storage::SessionInfo& s : store_->List(tenant)) {
      std::optional<std::string> id = SystemPromptIdOfSession(s.session_id);
      if (!id.has_value()) continue;
      SystemPromptInfo info;
      info.id = *id;
      info.tokens = s.cached_tokens;
      info.stored = true;
      info.persisted = s.persisted;
      info.stored_bytes = s.bytes;
      out.push_back(std::move(info));
    }
  }
  MutexLock lock(&mu_);
  for (const auto& [k, p] : prompts_) {
    if (p->key.tenant != tenant) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const SystemPromptInfo& i) { return i.id == p->id; });
    if (it == out.end()) {
      out.push_back(SystemPromptInfo{.id = p->id, .tokens = static_cast<int64_t>(p->tokens.size())});
      it = out.end() - 1;
    }
    it->resident = p->state == SharedPrompt::State::kReady;
    it->running_turns = p->users;
  }
  std::sort(out.begin(), out.end(), [](const SystemPromptInfo& a, const SystemPromptInfo& b) { return a.id < b.id; });
  return out;
}

}  // namespace strata::engine
