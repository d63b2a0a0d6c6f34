// What the engine's own files share: a running turn, the shared prompt's bookkeeping and
// the engine's metrics. engine/ only.
#ifndef STRATA_ENGINE_ENGINE_INTERNAL_H_
#define STRATA_ENGINE_ENGINE_INTERNAL_H_

#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/metrics.h"
#include "base/random.h"
#include "engine/engine.h"
#include "engine/tenant_metrics.h"
#include "text/stop_strings.h"

namespace strata::engine {

// How a turn ended, as strata_finished_turns_total{reason} names it: stop (an end-of-turn
// token or a stop string), length (max_new_tokens or the context reached), cancelled (its
// client went away), deadline (its call's deadline passed), error (it could not run or go
// on: it can never fit the KV memory, a backend fault), shutdown (the server stopped first).
enum class TurnEnd { kStop, kLength, kCancelled, kDeadline, kError, kShutdown };
inline constexpr TurnEnd kTurnEnds[] = {TurnEnd::kStop,     TurnEnd::kLength, TurnEnd::kCancelled,
                                        TurnEnd::kDeadline, TurnEnd::kError,  TurnEnd::kShutdown};
const char* TurnEndName(TurnEnd end);

// strata_kv_transfer_bytes_total{direction}, strata_kv_loads_total,
// strata_kv_load_device_seconds_total and strata_kv_load_stall_seconds_total, filled at
// each scrape from `model`'s KvTransferStats. `model` must outlive the registry's scrapes.
void ExportKvTransferMetrics(metrics::Registry& r, const model::ModelBackend* model);
// The shared system prompts the store holds (strata_system_prompts_stored{tier},
// strata_system_prompt_stored_bytes), read from `store` at each scrape.
void ExportStoredPromptMetrics(metrics::Registry& r, const storage::SessionStore* store);

// The status a turn its server cancelled fails with: DeadlineExceeded when the call's
// deadline passed, else Cancelled.
absl::Status CancelStatus(const TurnStream& stream);
// How a turn that fails with `why` ended: cancelled, deadline, or else error.
TurnEnd EndOf(const absl::Status& why);

// The engine's counters, following the names dashboards are built on.
struct Engine::Metrics {
  // `tenant_label`: the per-tenant counters too (EngineOptions::metrics_tenant_label).
  Metrics(metrics::Registry& r, bool tenant_label)
      : ttft(&r.AddHistogram("strata_ttft_seconds",
                             "Time from request arrival to first token, by the tier its cached prefix came from "
                             "(none: computed whole).",
                             {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60})),
        inter_token(r.AddHistogram("strata_inter_token_seconds", "Time between consecutive tokens of a turn.",
                                   {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5})
                        .WithLabels({})),
        kv_waits(r.AddCounter("strata_kv_memory_waits_total",
                              "Times an admitted turn went back to the queue because the KV memory had no room.")
                     .WithLabels({})),
        prefill_computed(r.AddCounter("strata_prefill_tokens_total",
                                      "Prompt tokens by source: computed or reused from cache.")
                             .WithLabels({{"source", "computed"}})),
        prefill_reused(r.AddCounter("strata_prefill_tokens_total", "")
                           .WithLabels({{"source", "reused"}})),
        generated(r.AddCounter("strata_generated_tokens_total", "Tokens generated.").WithLabels({})),
        lookups(r.AddCounter("strata_cache_lookups_total",
                             "Session cache lookups (one per admitted turn with the cache on).")
                    .WithLabels({})),
        hits(&r.AddCounter("strata_cache_hits_total",
                           "Lookups that reused a cached prefix, by the tier that served it.")),
        batch_size(r.AddHistogram("strata_batch_size", "Turns in one forward step.",
                                  metrics::ExponentialBuckets(1, 2, 8)).WithLabels({})),
        ssd_decisions(&r.AddCounter("strata_ssd_fetch_decisions_total",
                                    "Turns whose history was only on SSD, by what fetch-or-recompute chose: "
                                    "load (from SSD) or recompute.")),
        queue_depth(r.AddGauge("strata_queue_depth", "Turns waiting for admission.").WithLabels({})),
        running(r.AddGauge("strata_running_turns", "Turns being computed.").WithLabels({})),
        prompt_hits(r.AddCounter("strata_system_prompt_hits_total",
                                 "Turns that ran on a shared system prompt already in KV memory.")
                        .WithLabels({})),
        prompt_loads(&r.AddCounter("strata_system_prompt_loads_total",
                                   "Shared system prompts brought into KV memory, by source: computed, or "
                                   "stored (loaded from the host or SSD tier).")),
        prompts_resident(r.AddGauge("strata_system_prompts", "Shared system prompts in KV memory.").WithLabels({})),
        prompt_bytes(r.AddGauge("strata_system_prompt_bytes", "KV memory held by shared system prompts.")
                         .WithLabels({})),
        e2e(r.AddHistogram("strata_e2e_request_seconds",
                           "Time from request arrival to the turn's end (its last token, or its failure), "
                           "whatever the reason it ended.",
                           {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600})
                .WithLabels({})),
        queue(r.AddHistogram("strata_queue_seconds",
                             "Time from request arrival to admission into the running batch.",
                             {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300})
                  .WithLabels({})),
        admit(r.AddHistogram("strata_admit_seconds",
                             "Time a turn's admission took (part of its prefill time): its sequence taken (resident "
                             "in HBM, lent by a write-back, or new pages), its cached prefix matched, its loads "
                             "queued.",
                             {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1})
                  .WithLabels({})),
        prefill(r.AddHistogram("strata_prefill_seconds",
                               "Time from admission to the first token: the prompt's prefill, cached KV loads "
                               "included.",
                               {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60})
                    .WithLabels({})),
        decode(r.AddHistogram("strata_decode_seconds", "Time from a turn's first token to its end.",
                              {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600})
                   .WithLabels({})),
        prompt_tokens(r.AddHistogram("strata_prompt_tokens", "Prompt tokens of a turn (the whole conversation).",
                                     metrics::ExponentialBuckets(1, 4, 10))
                          .WithLabels({})),
        truncations(r.AddCounter("strata_context_truncations_total",
                                 "Turns whose conversation was cut to fit the context window.")
                        .WithLabels({})),
        truncated_tokens(r.AddCounter("strata_context_truncated_tokens_total",
                                      "Tokens dropped from conversations cut to fit the context window.")
                             .WithLabels({})),
        generation_tokens(r.AddHistogram("strata_generation_tokens", "Tokens a turn generated.",
                                         metrics::ExponentialBuckets(1, 4, 10))
                              .WithLabels({})) {
    for (const char* source : {"computed", "stored"}) prompt_loads->WithLabels({{"source", source}});
    for (const char* tier : {"hbm", "host", "ssd"}) hits->WithLabels({{"tier", tier}});
    for (const char* tier : {"none", "hbm", "host", "ssd"}) ttft->WithLabels({{"tier", tier}});
    for (const char* choice : {"load", "recompute"}) ssd_decisions->WithLabels({{"choice", choice}});
    metrics::Family<metrics::Histogram>& steps =
        r.AddHistogram("strata_step_seconds",
                       "Time of one forward step, by what it held: decode (every turn a token), prefill (prompt "
                       "chunks only) or mixed (both).",
                       {0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                        0.075, 0.1, 0.25, 0.5, 1, 2.5});
    step_decode = &steps.WithLabels({{"kind", "decode"}});
    step_prefill = &steps.WithLabels({{"kind", "prefill"}});
    step_mixed = &steps.WithLabels({{"kind", "mixed"}});
    metrics::Family<metrics::Counter>& thread =
        r.AddCounter("strata_engine_thread_seconds_total",
                     "Where the engine thread's time went, by part: forward (the model's forward steps), schedule "
                     "(admitting and starting turns, their loads queued, a step's batch built), emit (after a "
                     "step: tokens to the streams), finish (ended turns: their write-backs started, their ends "
                     "sent), release (landed loads and write-backs released) and idle (waiting for work).");
    const std::pair<LoopPart, const char*> parts[] = {
        {LoopPart::kIdle, "idle"}, {LoopPart::kSchedule, "schedule"}, {LoopPart::kForward, "forward"},
        {LoopPart::kEmit, "emit"}, {LoopPart::kFinish, "finish"},     {LoopPart::kRelease, "release"}};
    static_assert(std::size(parts) == static_cast<size_t>(LoopPart::kCount), "every part is named");
    for (const auto& [part, name] : parts) thread_parts[static_cast<int>(part)] = &thread.WithLabels({{"part", name}});
    metrics::Family<metrics::Counter>& ended =
        r.AddCounter("strata_finished_turns_total",
                     "Turns that ended, by reason: stop, length, cancelled, deadline, error, shutdown.");
    for (TurnEnd end : kTurnEnds) {
      finished[static_cast<int>(end)] = &ended.WithLabels({{"reason", TurnEndName(end)}});
    }
    if (tenant_label) tenants = std::make_unique<TenantMetrics>(r);
  }

  // A turn's life, observed where it happens (engine loop only); an end is counted before
  // the turn's stream ends, so whoever saw the end sees it counted. Prompt jobs are not
  // turns: these ignore them.
  //
  // Admitted into the running batch: its time in the queue, and the admission's own.
  void TurnStarted(const Running& r);
  // Its first token drawn: its prefill time and TTFT.
  void FirstToken(const Running& r);
  // Ended `how`: the reason counted; its end-to-end time, decode time (when it drew a
  // first token), prompt and generated tokens observed.
  void TurnEnded(TurnEnd how, const Running& r);
  // Ended `how` before it started (queued, then cancelled, refused or shut down).
  void TurnEnded(TurnEnd how, const Queued& q);

  metrics::Family<metrics::Histogram>* ttft;
  metrics::Histogram& inter_token;
  metrics::Counter& kv_waits;
  metrics::Counter& prefill_computed;
  metrics::Counter& prefill_reused;
  metrics::Counter& generated;
  metrics::Counter& lookups;
  metrics::Family<metrics::Counter>* hits;
  metrics::Histogram& batch_size;
  metrics::Histogram *step_decode, *step_prefill, *step_mixed;  // strata_step_seconds by kind
  metrics::Counter* thread_parts[static_cast<int>(LoopPart::kCount)];  // strata_engine_thread_seconds_total
  metrics::Family<metrics::Counter>* ssd_decisions;
  metrics::Gauge& queue_depth;
  metrics::Gauge& running;
  metrics::Counter& prompt_hits;
  metrics::Family<metrics::Counter>* prompt_loads;
  metrics::Gauge& prompts_resident;
  metrics::Gauge& prompt_bytes;
  metrics::Histogram& e2e;
  metrics::Histogram& queue;
  metrics::Histogram& admit;
  metrics::Histogram& prefill;
  metrics::Histogram& decode;
  metrics::Histogram& prompt_tokens;
  metrics::Counter& truncations;
  metrics::Counter& truncated_tokens;
  metrics::Histogram& generation_tokens;
  metrics::Counter* finished[std::size(kTurnEnds)];  // by TurnEnd
  std::unique_ptr<TenantMetrics> tenants;            // null: no per-tenant series

 private:
  void Ended(TurnEnd how, const TurnRequest& request, int64_t generated, absl::Time now);
};

// A shared system prompt the engine knows in memory.
struct Engine::SharedPrompt {
  std::string id;
  storage::SessionKey key;  // its store session
  std::vector<int32_t> tokens;
  // kWanted: a prompt job is bringing its KV in; kReady: `seq` holds it; kFailed: the job
  // failed (turns compute it inline until a retry after kPromptRetry).
  enum class State { kWanted, kReady, kFailed } state = State::kWanted;
  std::shared_ptr<model::SequenceState> seq;
  // Wanted by batch turns only (their group's prefix): never stored, freed when its group
  // ends (ReleaseBatchPrefix). A chat turn or registration wanting it makes it a lasting one.
  bool ephemeral = false;
  int users = 0;  // turns admitted on it that have not ended
  uint64_t instance = 0;  // this one of the prompts that had its key (one per drop and share again)
  uint64_t last_use = 0;
  absl::Time failed_at = absl::InfinitePast();
};

struct Engine::Running {
  TurnRequest request;
  std::shared_ptr<TurnStream> stream;
  std::string session_key;
  std::unique_ptr<model::SequenceState> seq;  // null once the turn has ended
  std::vector<int32_t> tokens;  // prompt, then every generated token
  int64_t computed = 0;         // tokens whose KV is in kv: [0, computed)
  int64_t reused = 0;           // of those, loaded from the session cache
  int64_t keep = 0;             // leading tokens whose stored chunks stay as they are on save
  storage::Tier tier = storage::Tier::kNone;
  int64_t generated = 0;
  int32_t next_token = -1;  // drawn by the backend at the end of the turn's last step
  SplitMix64 rng{0};
  text::Utf8StreamDecoder utf8;
  text::StopStringFilter stop_filter{{}};
  bool first_token_sent = false;
  bool text_started = false;  // some text has been streamed (the leading-space rule is applied)
  double ttft_ms = 0;
  absl::Time admitted;     // when it left the queue
  absl::Time first_token;  // when its first token was drawn
  absl::Time last_token;   // when its last token was drawn
  int step_tokens = 0;  // tokens fed in the current step
  // Shared system prompts: a prompt job (computes a prompt's KV, samples nothing), or a
  // turn on a prompt (prompt_key set): its own tokens start after the prompt's
  // base_tokens, and its session is saved on the prompt's id (`base`).
  bool prompt_job = false;
  std::string prompt_key;
  uint64_t prompt_use = 0;  // Queued::prompt_use
  int64_t base_tokens = 0;
  std::string base;
  // A turn that took its session's sequence from the previous turn's write-back still in
  // flight (Engine::BorrowSaving): that save's ticket (0: none). Until the save completes,
  // the sequence goes back to it rather than being freed (the copy still reads its pages),
  // and the turn keeps none of the stored chunks on its own save.
  uint64_t lent_by = 0;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_ENGINE_INTERNAL_H_
