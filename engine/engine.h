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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "base/metrics.h"
#include "model/model_backend.h"
#include "text/tokenizer.h"
#include "engine/hbm_tier.h"
#include "engine/turn.h"
#include "storage/session_store.h"

namespace strata::engine {

struct EngineOptions {
  int max_running = 64;           // turns in one batch
  int max_step_tokens = 512;      // tokens in one forward step (decodes + prefill chunks)
  int max_new_tokens_limit = 4096;
  int max_queued = 1024;          // turns waiting for admission
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

  const model::ModelConfig& config() const { return model_->config(); }
  const model::ModelBackend& model() const { return *model_; }
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
  };
  struct Promotion {
    uint64_t id;
    storage::SessionKey key;
  };
  struct Running;
  struct Metrics;

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
  absl::StatusOr<std::unique_ptr<model::SequenceState>> TakeSequence(const Queued& queued, int64_t capacity,
                                                                     int64_t* hbm_tokens);
  // Puts turns that could not start back at the head of the queue, in order.
  void Requeue(std::vector<Queued> turns);
  // Ends a turn that will not start: fails its stream with `why` and frees its session.
  void Abandon(Queued& queued, const absl::Status& why);
  // Queues the load of the session's first `tokens` tokens of stored KV into the turn's
  // sequence from the host tier. The chunks stay leased (pinned, no store lock held) in
  // round_leases_ until the backend has moved them. Returns how many tokens were queued
  // (fewer when the store holds fewer or a chunk cannot be placed).
  int64_t LoadPrefix(Running& r, int64_t tokens);
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
  // Samples after a step; returns true when the turn has ended.
  bool AfterStep(Running& r);
  void End(Running& r, FinishReason reason);

  const EngineOptions options_;
  std::unique_ptr<model::ModelBackend> model_;
  const text::Tokenizer* tokenizer_;
  storage::SessionStore* store_;
  std::unique_ptr<Metrics> metrics_;
  // The HBM tier (engine loop only); null with the cache off. Declared after model_: its
  // sequences go before the backend does.
  std::unique_ptr<HbmTier> hbm_;

  mutable Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
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
  // session stays in active_sessions_ until then, so its next turn waits for it alone.
  struct SaveInFlight {
    uint64_t ticket;  // the backend's (MarkKvSaves)
    uint64_t fill;    // the store's (SaveAsync)
    storage::SessionKey key;
    std::string session_key;
    std::unique_ptr<model::SequenceState> seq;
    std::vector<int32_t> tokens;
  };
  std::deque<SaveInFlight> saves_in_flight_;
  std::thread loop_;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_ENGINE_H_
