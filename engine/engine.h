// Engine: continuous batching of chat turns over one model, with each session's KV kept
// in the session cache between turns.
//
// A turn is queued by Submit(). The engine loop (one thread, owned by the Engine) admits
// queued turns whose session is not already running (two turns of one session never
// interleave on its KV), finds the longest prefix of the conversation the session cache
// holds, places that KV (rotating K to its position), and then runs steps: each step is
// one forward pass over the decode token of every running turn plus chunks of the
// prompts still being prefilled. When a turn ends its new KV is saved to the cache.
#ifndef STRATA_ENGINE_ENGINE_H_
#define STRATA_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/metrics.h"
#include "model/model_backend.h"
#include "text/tokenizer.h"
#include "engine/context_window.h"
#include "engine/hbm_tier.h"
#include "engine/stream_waker.h"
#include "engine/turn.h"
#include "storage/session_store.h"

namespace strata::engine {

struct EngineOptions {
  int max_running = 64;           // turns in one batch
  int max_step_tokens = 512;      // tokens in one forward step (decodes + prefill chunks)
  int max_new_tokens_limit = 4096;
  int max_queued = 1024;          // turns waiting for admission
  // Turns one tenant may have waiting for admission (0: no limit beyond max_queued), so
  // that one tenant's flood cannot fill the queue for the others.
  int max_queued_per_tenant = 0;
  // Running slots batch turns (TurnRequest::batch) leave free for chat turns, so that a
  // chat turn arriving during a batch starts at once (at most max_running - 1).
  int batch_reserved_running = 4;
  // Batch turns in a pool of their own of this many running turns, beside max_running chat
  // turns (a decode step then holds up to both); 0: they share max_running as above.
  int max_running_batch = 0;
  int max_stop_strings = 8;
  int max_stop_string_bytes = 256;
  // A turn whose cached prefix is only on SSD recomputes it instead when the measured
  // prefill speed makes that faster than the measured SSD load.
  bool fetch_or_recompute = true;
  // Prefill tokens of a scratch step timed at start, so the prefill speed the rule above
  // compares with is known before the first turn (and the device is warm); 0: not done.
  int warmup_tokens = 512;
  // Finished turns' KV kept in the backend's KV memory (the HBM tier); with the cache on.
  HbmTierOptions hbm;
  // Shared system prompts (TurnRequest::system_tokens): with the cache on and a backend
  // that shares prefixes, a system part of at least this many tokens is computed once,
  // kept as a shared prefix and stored once; its turns run on it (relay attention).
  // Shorter ones are computed inline with each session (docs/DESIGN.md says why). 0: off.
  int min_shared_prompt_tokens = 128;
  // Shared prompts no running turn uses that stay in KV memory (least recently used go
  // first; also when a turn needs the memory). Their stored copy stays.
  int max_idle_shared_prompts = 16;
  // The context window served, in tokens: the model's (0), or less (a smaller window for
  // tests and for memory; never more than the model's).
  int64_t max_context = 0;
  // Conversations past the window (context_window.h); the server applies the policy, the
  // engine counts the cuts and reuses the kept tokens' stored KV.
  ContextWindowOptions context_window;
  // Also count turns and tokens per tenant (tenant_metrics.h): one series per tenant, so
  // off unless the operator asks.
  bool metrics_tenant_label = false;
  // Threads that wake the request threads waiting on the turns' streams after each step
  // (StreamWaker), so that the engine loop goes on to the next step at once; 0: the loop
  // wakes them itself.
  int stream_wake_threads = 2;

  absl::Status Validate() const;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t max_batch_turns = 0;  // most turns seen in one step
  int64_t recomputed_instead_of_load = 0;  // SSD prefixes recomputed because that was faster
  double prefill_tokens_per_second = 0;    // measured (EWMA over steps with prefill)
};

class Engine {
 public:
  // `store` may be null: the session cache is off and every turn computes its whole
  // prompt. `registry` may be null (no metrics). `tokenizer` must outlive the engine.
  // InvalidArgument when the options do not validate or the store's chunk layout does
  // not fit the model.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                        std::unique_ptr<model::ModelBackend> model,
                                                        const text::Tokenizer* tokenizer,
                                                        storage::SessionStore* store,
                                                        metrics::Registry* registry);
  // Stops the loop; turns still queued or running end with Unavailable.
  ~Engine();

  // Queues a turn. Returns InvalidArgument (with what is wrong) for an empty prompt, a
  // token outside the vocabulary, a prompt that does not fit the context, a
  // max_new_tokens outside 1..limit, bad sampling values or stop strings;
  // ResourceExhausted when the queue is full. Nothing is changed on error.
  // Thread-safe; never blocks on the engine loop.
  absl::StatusOr<std::shared_ptr<TurnStream>> Submit(TurnRequest request);

  // Blocks until no turn is queued or running and every finished turn's write-back has
  // completed (its session is then in the host tier and, if kept, the HBM tier), or until
  // `timeout` passes. Returns whether the engine went idle. Thread-safe.
  bool AwaitIdle(absl::Duration timeout);
  // Refuses new turns from now on (Submit: Unavailable); queued and running turns go on.
  // For a graceful shutdown: Drain(), then AwaitIdle().
  void Drain();

  // Whether turns with a system part of `tokens` tokens run on a shared prompt: the cache
  // is on, the backend shares prefixes and the prompt is min_shared_prompt_tokens or more.
  bool SharesSystemPrompt(int64_t tokens) const;
  // Shared system prompts of a tenant (system_prompt_names.h). Register makes `tokens` a
  // shared prompt and starts bringing its KV into memory (loaded when stored, else
  // computed), where SharesSystemPrompt (else only names it: its turns compute it inline,
  // as they would without the id); idempotent, returns its id. InvalidArgument for an empty prompt, a token
  // outside the vocabulary or one that leaves no room in the context; FailedPrecondition
  // when prompts cannot be shared (the cache is off). Thread-safe.
  absl::StatusOr<std::string> RegisterSystemPrompt(const std::string& tenant, std::vector<int32_t> tokens);
  // Drops the prompt from memory and from the store. Turns running on it finish, and
  // turns queued before the drop compute it inline (they do not bring it back); later
  // lookups of the id are NotFound (until the same tokens are shared again by a newer
  // turn or registration). NotFound when the tenant has no such prompt; an unknown one
  // changes nothing unless `known` (the caller registered it: the queued turns on it still
  // compute it inline).
  absl::Status DropSystemPrompt(const std::string& tenant, const std::string& id, bool known = false);
  struct SystemPromptInfo {
    std::string id;
    int64_t tokens = 0;
    bool resident = false;  // its KV is in KV memory now
    int running_turns = 0;  // turns running on it
    bool stored = false;    // the store holds it (host or SSD)
    bool persisted = false; // on SSD: it survives a restart
    int64_t stored_bytes = 0;
  };
  std::vector<SystemPromptInfo> ListSystemPrompts(const std::string& tenant) const;
  // How many drops of prompts the engine remembers (for the turns queued before them).
  size_t RememberedPromptDropsForTesting() const;
  // Runs `hook` on the engine thread between a prompt job's end and its save's start (set
  // before the engine has work).
  void SetBeforePromptSaveForTesting(std::function<void()> hook) { before_prompt_save_ = std::move(hook); }
  // A batch group's shared prefix (the system part of batch turns) is no longer needed:
  // its KV memory is freed now unless a turn still uses or waits for it, or a chat turn or
  // registration shares the same prompt. Returns whether it was freed. Thread-safe.
  bool ReleaseBatchPrefix(const std::string& tenant, absl::Span<const int32_t> tokens);

  const model::ModelConfig& config() const { return model_->config(); }
  // The context window a turn's prompt and answer must fit (EngineOptions::max_context).
  int64_t context_tokens() const { return context_tokens_; }
  const ContextWindowOptions& context_window() const { return options_.context_window; }
  const model::ModelBackend& model() const { return *model_; }
  int64_t max_new_tokens_limit() const { return options_.max_new_tokens_limit; }
  EngineStats Stats() const;
  // The chunk layout the session cache must use for this model on the CPU backend (fp32
  // K/V rows); model::ChunkLayoutFor(backend, ...) gives any backend's.
  static storage::ChunkLayout ChunkLayoutFor(const model::ModelConfig& config, int chunk_tokens);

 private:
  struct Queued {
    TurnRequest request;
    std::shared_ptr<TurnStream> stream;
    uint64_t id = 0;
    // A turn whose session is held only on SSD waits in the queue, not admitted, while
    // the store promotes it; the engine never waits on the disk.
    enum class Load { kUnchecked, kPromoting, kReady } load = Load::kUnchecked;
    bool promoted = false;   // its session came up from SSD for it: an SSD hit
    bool recompute = false;  // its SSD prefix is recomputed: faster than loading it
    // Shared system prompts. A prompt job computes (or loads) a prompt's KV: its request's
    // key is the prompt's store session, its prompt the prompt's tokens, and it samples
    // nothing. A turn on a shared prompt names the prompt's map key (SharedPrompt) once
    // admission checked it; it waits (prompt_waiting) until the prompt is in memory.
    bool prompt_job = false;
    std::string prompt_key;
    bool prompt_waiting = false;
    uint64_t prompt_use = 0;  // the prompt instance (SharedPrompt::instance) it is a user of; 0: none
    // Admitted beside its session's write-back, whose sequence it borrows (that save's
    // ticket; 0: none).
    uint64_t borrow = 0;
  };
  struct SharedPrompt;
  struct Promotion {
    uint64_t id;
    storage::SessionKey key;
  };
  struct Running;
  struct Metrics;
  struct SaveInFlight;

  Engine(const EngineOptions& options, std::unique_ptr<model::ModelBackend> model, const text::Tokenizer* tokenizer,
         storage::SessionStore* store, metrics::Registry* registry);
  // Runs warmup_tokens of prefill twice on a scratch sequence and takes the second's
  // speed as the first prefill speed measured.
  void Warmup();
  void Loop();
  // Takes the turns that can start now; fills `promote` with the sessions to bring up
  // from SSD first (started by the caller, outside the lock).
  std::vector<Queued> AdmitLocked(std::vector<Promotion>* promote) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPromotions(std::vector<Promotion> promote);
  // Tells the store the waiting queue (the look-ahead of scheduler-aware placement).
  void PublishLookAhead();
  // Starts a turn: its sequence, and its cached prefix loaded. When the backend has no
  // KV memory for it now, returns null and hands the turn back in `queued`.
  std::unique_ptr<Running> Start(Queued& queued);
  // The turn's sequence: its session's resident one from the HBM tier when that shares a
  // prefix with the prompt (`*hbm_tokens` says how long), else a new one, making room
  // from the HBM tier as needed. ResourceExhausted when the memory is not there now.
  // On a shared prompt (`prefix`, of `base_tokens` tokens) a new sequence is made on it.
  // `*lent_by`: the save ticket when the sequence was borrowed (BorrowSaving).
  absl::StatusOr<std::unique_ptr<model::SequenceState>> TakeSequence(
      const Queued& queued, int64_t capacity, int64_t* hbm_tokens, std::shared_ptr<const model::SequenceState> prefix,
      int64_t base_tokens, uint64_t* lent_by);
  // A turn whose session's previous turn is still being written back may run on that
  // turn's sequence at once when its prompt extends every token saved (it writes only
  // positions the copy does not read): the write-back in flight that can lend it, or null.
  // Engine loop (admission included: it runs there).
  SaveInFlight* LendingSave(const Queued& queued);
  // Takes the sequence of the save the turn was admitted to borrow (Queued::borrow),
  // grown to `capacity`; null when that save has completed or the sequence cannot grow now
  // (the turn then starts as any other).
  std::unique_ptr<model::SequenceState> BorrowSaving(const Queued& queued, int64_t capacity, int64_t* tokens,
                                                     uint64_t* lent_by);
  // Ends the turn's hold on its sequence: back to the save that lent it while that save is
  // in flight, else freed.
  void ReleaseSequence(Running& r);
  // Shared prompts (system_prompts.cc).
  // The prompt `tokens` of `key`'s tenant, known from now on and wanted: a prompt job for
  // it is appended to `jobs`.
  SharedPrompt& WantPromptLocked(const storage::SessionKey& key, std::string id, std::vector<int32_t> tokens,
                                 std::vector<Queued>* jobs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For a queued turn whose system part is shared:
  // whether it may start now (its prompt is in memory; it then counts as one of the
  // prompt's users); otherwise the prompt is wanted (a prompt job queued in `jobs`) and the
  // turn waits, or the prompt failed and the turn computes it inline.
  bool PromptReadyLocked(Queued& q, std::vector<Queued>* jobs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Queued PromptJobLocked(const storage::SessionKey& key, std::vector<int32_t> tokens)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A prompt job's KV is all in place: the prompt is in memory for its turns, and saved.
  void FinishPromptJob(Running& r);
  // A prompt's save landed: dropped from the store again where the prompt was dropped after
  // the save was decided (FinishPromptJob decides, then starts it, outside the lock).
  void DropPromptSavedAfterItsDrop(const SaveInFlight& f);
  // A prompt job ended without its KV: the waiting turns compute the prompt inline.
  void FailPromptJobLocked(const std::string& prompt_key, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A turn on a prompt ended: one user fewer, of the prompt instance it used (`use`; a
  // prompt dropped and shared again since is another one).
  void ReleasePromptUseLocked(const std::string& prompt_key, uint64_t use) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A turn or prompt job that will not finish (`why`): whichever of the two above it is.
  void LeavePromptLocked(bool prompt_job, const std::string& prompt_key, uint64_t use, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the least recently used ready prompt no turn runs on (nor is in `keep`) from
  // memory; false when none.
  bool EvictIdlePromptLocked(const absl::flat_hash_set<std::string_view>* keep = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TrimIdlePromptsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishPromptGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A prompt was dropped at `when` (prompt_dropped_at_), older drops forgotten.
  void RememberPromptDropLocked(const std::string& map_key, absl::Time when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Puts turns that could not start back at the head of the queue, in order.
  void Requeue(std::vector<Queued> turns);
  // Ends a turn that will not start: fails its stream with `why` and frees its session.
  void Abandon(Queued& queued, const absl::Status& why);
  // Queues the load of the stored KV `match` found into the turn's sequence from the host
  // tier, past the session's first `from` own tokens (in the sequence already): its
  // tokens [from, match.kept) where they are, and across a cut the stored run after the
  // gap at its new positions (K rotated for them). The chunks stay leased (pinned, no
  // store lock held) in round_leases_ until the backend has moved them. Returns the own
  // tokens in place from 0 (fewer than match.tokens when the store holds fewer or a chunk
  // cannot be placed).
  int64_t LoadPrefix(Running& r, const storage::PrefixMatch& match, int64_t from);
  // Starts the loads this round's turns queued (the backend moves them beside the next
  // step); on a device fault `loaded`'s turns compute their prompts instead.
  void StartLoads(const std::vector<Running*>& loaded);
  // Releases the leases of loads that have completed (with `wait`, of all of them).
  void ReleaseLoads(bool wait);
  // Ends the write-backs whose copies have completed (with `wait`, all of them): the
  // store may serve and persist the session, its sequence joins the HBM tier, and the
  // session's next turn may start.
  void ReleaseSaves(bool wait);
  void Step();
  // Where the engine thread's time goes (strata_engine_thread_seconds_total{part}): Lap adds
  // the time since the last lap to `part` and returns it in seconds (engine loop only).
  enum class LoopPart { kIdle, kSchedule, kForward, kEmit, kFinish, kRelease, kCount };
  double Lap(LoopPart part);
  // Samples after a step; returns true when the turn has ended.
  bool AfterStep(Running& r);
  void End(Running& r, FinishReason reason);
  // Starts the write-back of the KV the turn computed (of `shared` for a prompt job, else
  // of its sequence, which the write-back then holds). False when nothing is being saved.
  bool StartSave(Running& r, std::shared_ptr<model::SequenceState> shared);

  const EngineOptions options_;
  std::unique_ptr<model::ModelBackend> model_;
  int64_t context_tokens_ = 0;
  const text::Tokenizer* tokenizer_;
  storage::SessionStore* store_;
  std::unique_ptr<Metrics> metrics_;
  absl::Time last_lap_;  // Lap (engine loop only)
  // Wakes the streams a step pushed to; null: the loop wakes them (stream_wake_threads 0).
  // Its threads stop after the loop's (declared before loop_).
  std::unique_ptr<StreamWaker> waker_;
  std::vector<std::shared_ptr<TurnStream>> to_wake_;  // this step's, for waker_ (engine loop only)
  // The HBM tier (engine loop only); null with the cache off. Declared after model_: its
  // sequences go before the backend does.
  std::unique_ptr<HbmTier> hbm_;

  mutable Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // Shared prompts known in memory, by map key of their store session.
  absl::flat_hash_map<std::string, std::unique_ptr<SharedPrompt>> prompts_ ABSL_GUARDED_BY(mu_);
  uint64_t prompt_clock_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prompt_instances_ ABSL_GUARDED_BY(mu_) = 0;  // SharedPrompt::instance, counted
  // Store sessions of prompts that admitted turns used from memory: touched (their TTL and
  // LRU place kept) by the loop outside the lock.
  std::vector<storage::SessionKey> prompts_to_touch_ ABSL_GUARDED_BY(mu_);
  // When each dropped prompt was dropped: turns that arrived before that compute it inline
  // rather than bring it back.
  absl::flat_hash_map<std::string, absl::Time> prompt_dropped_at_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> active_sessions_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int promotions_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool lookahead_changed_ ABSL_GUARDED_BY(mu_) = false;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);

  std::vector<std::unique_ptr<Running>> running_;  // engine loop only
  // Host chunks leased for loads the backend is still moving, by transfer ticket (engine
  // loop only): they stay pinned in the host tier until the copies are done.
  struct LoadsInFlight {
    uint64_t ticket;
    std::vector<storage::ChunkLease> leases;
  };
  std::deque<LoadsInFlight> loads_in_flight_;
  std::vector<storage::ChunkLease> round_leases_;  // queued this admission round
  // Turns' KV on its way to the host tier (asynchronous write-back), oldest first (engine
  // loop only). The sequence is held (its pages untouched) until the copy completes; the
  // session stays in active_sessions_ until then, so its next turn waits for it alone —
  // unless that turn extends every saved token and borrows the sequence (`lent`: the
  // session's turn-taking is the borrower's from then on).
  struct SaveInFlight {
    uint64_t ticket;  // the backend's (MarkKvSaves)
    uint64_t fill;    // the store's (SaveAsync)
    storage::SessionKey key;
    std::string session_key;
    std::unique_ptr<model::SequenceState> seq;
    std::vector<int32_t> tokens;  // the sequence's, from position 0 (a shared prompt's too)
    int64_t base_tokens = 0;      // the shared prompt's length for a sequence on one
    // A prompt job's sequence, shared with the turns on the prompt: read by the copy, kept.
    std::shared_ptr<model::SequenceState> shared;
    bool lent = false;
    absl::Time started = absl::InfiniteFuture();  // a prompt job's: when its save was decided
  };
  std::deque<SaveInFlight> saves_in_flight_;
  std::function<void()> before_prompt_save_;  // SetBeforePromptSaveForTesting
  std::thread loop_;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_ENGINE_H_
