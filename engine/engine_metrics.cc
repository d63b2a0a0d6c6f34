// A turn's life as the engine's metrics see it: queued, admitted, first token, ended (and
// how), and the statuses a cancelled turn fails with.
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/system_prompt_names.h"

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
  admit.Observe(absl::ToDoubleSeconds(absl::Now() - r.admitted));
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

void ExportKvTransferMetrics(metrics::Registry& r, const model::ModelBackend* model) {
  auto& bytes = r.AddCounter("strata_kv_transfer_bytes_total",
                             "Bytes of KV copied between the session cache's chunks and the backend's KV memory, "
                             "by direction: load (host tier to KV memory) or save (the write-back).");
  auto& loads = r.AddCounter("strata_kv_loads_total",
                             "Rounds of cached KV loads a device backend started (one per admission round with "
                             "histories to load).")
                    .WithLabels({});
  auto& load_seconds = r.AddCounter("strata_kv_load_device_seconds_total",
                                    "Device time of the KV loads, from a round's first copy to its last placement "
                                    "(load bytes over this is the bus rate the loads reached).")
                           .WithLabels({});
  auto& stall = r.AddCounter("strata_kv_load_stall_seconds_total",
                             "Time forward steps waited at a layer for that layer's cached KV to land (0 when "
                             "the loads keep ahead of the compute).")
                    .WithLabels({});
  bytes.WithLabels({{"direction", "load"}});
  bytes.WithLabels({{"direction", "save"}});
  r.AddCollector([=, &bytes, &loads, &load_seconds, &stall] {
    const model::KvTransferStats s = model->kv_transfer_stats();
    metrics::SyncCounter(bytes.WithLabels({{"direction", "load"}}), static_cast<double>(s.load_bytes));
    metrics::SyncCounter(bytes.WithLabels({{"direction", "save"}}), static_cast<double>(s.save_bytes));
    metrics::SyncCounter(loads, static_cast<double>(s.loads));
    metrics::SyncCounter(load_seconds, s.load_seconds);
    metrics::SyncCounter(stall, s.load_stall_seconds);
  });
}

void ExportStoredPromptMetrics(metrics::Registry& r, const storage::SessionStore* store) {
  auto& stored = r.AddGauge("strata_system_prompts_stored",
                            "Shared system prompts the session store holds (each once per tenant), by tier: "
                            "host (a copy in host memory) or ssd (persisted: back after a restart).");
  auto& bytes = r.AddGauge("strata_system_prompt_stored_bytes",
                           "Bytes of the shared system prompts' KV chunks in the session store.")
                    .WithLabels({});
  r.AddCollector([=, &stored, &bytes] {
    const storage::SessionStore::IdPrefixTotals t = store->TotalsOfIdPrefix(SystemPromptSessionPrefix());
    stored.WithLabels({{"tier", "host"}}).Set(static_cast<double>(t.on_host));
    stored.WithLabels({{"tier", "ssd"}}).Set(static_cast<double>(t.persisted));
    bytes.Set(static_cast<double>(t.bytes));
  });
}

}  // namespace strata::engine
