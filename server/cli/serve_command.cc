// `strata serve`: the flags that configure a server, and the serve loop.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/cpu_idle_pollers.h"
#include "server/auth.h"
#include "base/log.h"
#include "server/cli/commands.h"
#include "server/cli/shared_flags.h"
#include "server/cli/version.h"
#include "server/strata_server.h"
#include "storage/tenant_quota.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "serve: address to listen on");
ABSL_FLAG(int, metrics_port, 9464,
          "serve: Prometheus /metrics port, with a status page for browsers at / (0: pick a free one, -1: off)");
ABSL_FLAG(double, status_sample_seconds, 5,
          "serve: how often the status page's plots sample the metrics (it keeps the last 180 samples)");
ABSL_FLAG(bool, metrics_tenant_label, false,
          "serve: also count turns and tokens per tenant (strata_tenant_*_total{tenant}) and show each tenant's "
          "cache bytes, quotas and quota evictions (strata_tenant_cache_*): one series per tenant of the API keys, "
          "so off by default");
ABSL_FLAG(std::string, cache, "on", "serve: session KV cache, on or off");
ABSL_FLAG(int64_t, host_cache_bytes, int64_t{1} << 30, "serve: capacity of the host-memory tier");
ABSL_FLAG(bool, pin_host_memory, true,
          "serve: lock the host tier in memory (needs CAP_IPC_LOCK or a memlock limit as large)");
ABSL_FLAG(int, chunk_tokens, 256, "serve: tokens per KV chunk");
ABSL_FLAG(std::string, ssd_dirs, "",
          "serve: comma-separated directories for the SSD tier (one preallocated file each); empty: off");
ABSL_FLAG(int64_t, ssd_capacity_bytes, int64_t{16} << 30, "serve: SSD tier capacity per directory");
ABSL_FLAG(std::string, index_dir, "", "serve: RocksDB session index (default: <first ssd dir>/index)");
ABSL_FLAG(double, ssd_read_bytes_per_second, 0,
          "serve: the SSD tier's read speed to assume for fetch-or-recompute (0: probe it at start)");
ABSL_FLAG(int64_t, ssd_probe_bytes, int64_t{64} << 20,
          "serve: bytes written to and read back from the SSD tier at start to measure its read speed (0: off)");
ABSL_FLAG(int64_t, tenant_host_quota_bytes, 0,
          "serve: host-tier bytes each tenant's sessions may hold; a tenant past it makes room among its own "
          "sessions only, or its save is not cached (0: no quota; whole chunks)");
ABSL_FLAG(int64_t, tenant_ssd_quota_bytes, 0,
          "serve: SSD-tier bytes each tenant's sessions may hold; a tenant past it makes room among its own sessions "
          "held only on SSD, or its session stays host-only (0: no quota; whole chunks)");
ABSL_FLAG(std::string, tenant_quotas, "",
          "serve: quotas of single tenants in place of --tenant_host_quota_bytes / --tenant_ssd_quota_bytes: "
          "'acme:host=8GiB,ssd=64GiB;globex:host=0' (a field left out keeps the default; 0: no quota; bytes, or "
          "KiB, MiB, GiB, TiB)");
ABSL_FLAG(int64_t, ttl_seconds, 86400, "serve: sessions unused this long are dropped from every tier");
ABSL_FLAG(std::string, placement, "scheduler-aware",
          "serve: placement policy: scheduler-aware (prefetch from the queue, never evict it), lru, fifo");
ABSL_FLAG(bool, fetch_or_recompute, true,
          "serve: recompute a prefix held only on SSD when that is measured to be faster than loading it");
ABSL_FLAG(int64_t, hbm_cache_bytes, -1,
          "serve: KV memory finished turns may keep for their session's next turn (the HBM tier); -1: the whole GPU "
          "KV pool (resident sessions give way to running turns) or 256 MiB on the CPU backend; 0: off");
ABSL_FLAG(int, max_batch, 64, "serve: most turns in one decode batch");
ABSL_FLAG(int, max_step_tokens, 512, "serve: most tokens in one forward step");
ABSL_FLAG(int, max_new_tokens_limit, 4096, "serve: largest max_new_tokens a request may ask for");
ABSL_FLAG(std::string, api_keys, "",
          "serve: comma-separated key=tenant[:admin] entries (visible in ps: prefer --api_keys_file or "
          "STRATA_API_KEYS); none anywhere: no auth, one tenant 'default'");
ABSL_FLAG(std::string, api_keys_file, "",
          "serve: a file of key=tenant[:admin] entries (one a line or comma-separated, '#' comments), "
          "reloaded on SIGHUP");
ABSL_FLAG(std::string, tls_cert, "", "serve: PEM certificate (chain) of the gRPC port; with --tls_key: TLS");
ABSL_FLAG(std::string, tls_key, "", "serve: PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "serve: PEM CA that must have signed every client's certificate (mutual TLS)");
ABSL_FLAG(std::string, admin_tenant, "",
          "serve: a tenant (of --api_keys) whose CacheService.Stats covers every tenant; empty: none");
ABSL_FLAG(int, drain_seconds, 30,
          "serve: on SIGTERM/SIGINT, how long running turns may take to finish (health says NOT_SERVING and "
          "new turns get UNAVAILABLE meanwhile)");
ABSL_FLAG(int, max_rpc_threads, 2048,
          "serve: threads the gRPC server runs calls on: each running call and each open ChatSession stream holds "
          "one, and a call past them gets RESOURCE_EXHAUSTED at once");
ABSL_FLAG(int, cpu_idle_poll_threads, 0,
          "serve: keep this many CPUs out of their idle state with a spinning thread each, pinned, at SCHED_IDLE "
          "(it runs only when nothing else wants the CPU): on a VM, where waking a halted vCPU costs ~0.1 ms and a "
          "turn's token crosses several threads, it takes ~0.25 ms off TTFT after a pause, for power and CPUs "
          "that read busy (-1: every CPU; 0: off)");
ABSL_FLAG(int, stream_wake_threads, 2,
          "serve: threads that wake the calls waiting for a step's tokens, so the engine goes on to the next step "
          "at once (waking 64 sleeping threads took ~0.2 ms of each decode step on the H200 VM); 0: the engine wakes "
          "them itself");
ABSL_FLAG(std::string, port_file, "", "serve: write 'grpc_port metrics_port' here once listening");
ABSL_FLAG(int, max_queued_per_tenant, 0,
          "serve: turns one tenant may have waiting (RESOURCE_EXHAUSTED past it, naming the limit); 0: no "
          "limit of its own");
ABSL_FLAG(int, max_batch_prompts, 100000, "serve: prompts one BatchGenerate call may send (RESOURCE_EXHAUSTED past it)");
ABSL_FLAG(double, batch_kv_fraction, 0.8,
          "serve: the share of the KV memory one batch's prompts in flight may hold (the rest stays for chat turns)");
ABSL_FLAG(int, batch_reserved_running, 4,
          "serve: running slots batch prompts leave free for chat turns (of --max_batch), so chat turns start at "
          "once during a batch");
ABSL_FLAG(int, max_batch_running, -1,
          "serve: batch prompts running at once in a pool of their own beside --max_batch chat turns (a decode step "
          "then holds both; BatchLLM's throughput batching); 0: they share --max_batch, less "
          "--batch_reserved_running; -1: 256 on the GPU (decode steps are bound by reading the weights), 0 on the CPU");
ABSL_FLAG(int, min_shared_prompt_tokens, 128,
          "serve: a conversation's system part of at least this many tokens is shared across sessions "
          "(computed once, stored once, relay attention); shorter ones are computed with each session; 0: off");
ABSL_FLAG(std::string, context_overflow, "truncate",
          "serve: a messages conversation longer than the context window: truncate (keep the system part, drop the "
          "oldest messages; a request may say otherwise) or reject (INVALID_ARGUMENT)");
ABSL_FLAG(double, context_truncation_ratio, 0.5,
          "serve: a truncated conversation drops a multiple of this share of the context window (AttentionStore: "
          "half), so a growing conversation is cut once per that many tokens");
ABSL_FLAG(bool, context_truncation_reuse, true,
          "serve: a truncated conversation's kept tokens reuse their stored KV at their new positions (AttentionStore; "
          "an approximation: that KV was computed after the dropped tokens); false: they are recomputed once, and "
          "answers equal those with the cache off");
ABSL_FLAG(int64_t, max_context, 0,
          "serve: the context window served, in tokens (0: the model's; smaller values save KV memory, and tests "
          "use them)");
ABSL_FLAG(std::string, system_prompts_file, "",
          "serve: where registered system prompts are kept across restarts; empty: "
          "<first --ssd_dirs>/system_prompts.json, or memory only without an SSD tier");

namespace strata::server::cli {
namespace {

// The API keys of --api_keys, --api_keys_file and STRATA_API_KEYS together (a key given
// twice is an error). The messages name the source, never a key.
absl::StatusOr<std::map<std::string, ApiKey>> LoadApiKeys() {
  std::map<std::string, ApiKey> all;
  auto add = [&](const std::string& text, const std::string& source) -> absl::Status {
    auto keys = ApiKeys::Parse(text);
    if (!keys.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", keys.status().message()));
    for (auto& [k, v] : *keys) {
      if (!all.emplace(k, v).second) return absl::InvalidArgumentError(absl::StrCat(source, " repeats a key"));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = add(absl::GetFlag(FLAGS_api_keys), "--api_keys"); !s.ok()) return s;
  if (const char* env = std::getenv("STRATA_API_KEYS"); env != nullptr) {
    if (absl::Status s = add(env, "STRATA_API_KEYS"); !s.ok()) return s;
  }
  if (const std::string path = absl::GetFlag(FLAGS_api_keys_file); !path.empty()) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return absl::InvalidArgumentError(absl::StrCat("--api_keys_file: cannot read ", path));
    if (absl::Status s = add(text.str(), "--api_keys_file " + path); !s.ok()) return s;
  }
  if (!absl::GetFlag(FLAGS_api_keys).empty()) {
    LOG(WARNING) << "--api_keys puts keys on the command line, where ps shows them; use --api_keys_file or "
                    "STRATA_API_KEYS";
  }
  return all;
}

// Fills `o` from the flags; false (having said why on stderr) for a bad value.
bool OptionsFromFlags(ServerOptions& o) {
  const std::string host = absl::GetFlag(FLAGS_host);
  o.listen_address = host + ":" + std::to_string(absl::GetFlag(FLAGS_port));
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.metrics_address = metrics_port < 0 ? "" : host + ":" + std::to_string(metrics_port);
  o.status_sample_interval = absl::Seconds(absl::GetFlag(FLAGS_status_sample_seconds));
  o.engine.metrics_tenant_label = absl::GetFlag(FLAGS_metrics_tenant_label);
  o.engine.stream_wake_threads = absl::GetFlag(FLAGS_stream_wake_threads);
  if (o.engine.stream_wake_threads < 0 || o.engine.stream_wake_threads > 64) {
    std::fprintf(stderr, "--stream_wake_threads must be in [0, 64], got %d\n", o.engine.stream_wake_threads);
    return false;
  }
  const std::string cache = absl::GetFlag(FLAGS_cache);
  if (cache != "on" && cache != "off") {
    std::fprintf(stderr, "--cache must be on or off, got '%s'\n", cache.c_str());
    return false;
  }
  o.cache_enabled = cache == "on";
  o.store.host_capacity_bytes = absl::GetFlag(FLAGS_host_cache_bytes);
  o.store.lock_host_memory = absl::GetFlag(FLAGS_pin_host_memory);
  o.store.layout.chunk_tokens = absl::GetFlag(FLAGS_chunk_tokens);
  for (absl::string_view dir : absl::StrSplit(absl::GetFlag(FLAGS_ssd_dirs), ',', absl::SkipEmpty())) {
    o.store.ssd_dirs.emplace_back(dir);
  }
  o.store.ssd_capacity_bytes_per_dir = absl::GetFlag(FLAGS_ssd_capacity_bytes);
  o.store.ssd_read_bytes_per_second = absl::GetFlag(FLAGS_ssd_read_bytes_per_second);
  o.store.ssd_probe_bytes = absl::GetFlag(FLAGS_ssd_probe_bytes);
  o.store.index_dir = absl::GetFlag(FLAGS_index_dir);
  o.store.ttl = absl::Seconds(absl::GetFlag(FLAGS_ttl_seconds));
  o.store.tenant_quota.host_bytes = absl::GetFlag(FLAGS_tenant_host_quota_bytes);
  o.store.tenant_quota.ssd_bytes = absl::GetFlag(FLAGS_tenant_ssd_quota_bytes);
  auto quotas = storage::ParseTenantQuotas(absl::GetFlag(FLAGS_tenant_quotas), o.store.tenant_quota);
  if (!quotas.ok()) {
    std::fprintf(stderr, "--tenant_quotas: %s\n", std::string(quotas.status().message()).c_str());
    return false;
  }
  o.store.tenant_quotas = *std::move(quotas);
  auto placement = storage::ParsePlacementPolicy(absl::GetFlag(FLAGS_placement));
  if (!placement.ok() || *placement == storage::PlacementPolicy::kBelady) {
    std::fprintf(stderr, "--placement: %s\n",
                 placement.ok() ? "belady needs the future; it runs only in the simulator"
                                : std::string(placement.status().message()).c_str());
    return false;
  }
  o.store.placement = *placement;
  o.engine.hbm.placement = *placement;
  o.engine.hbm.capacity_bytes = absl::GetFlag(FLAGS_hbm_cache_bytes);
  o.model = ServedModelFromFlags();
  o.model.backend.cuda.tuned_decode_rows = absl::GetFlag(FLAGS_max_batch);
  o.engine.fetch_or_recompute = absl::GetFlag(FLAGS_fetch_or_recompute);
  o.engine.max_running = absl::GetFlag(FLAGS_max_batch);
  o.engine.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  o.engine.max_new_tokens_limit = absl::GetFlag(FLAGS_max_new_tokens_limit);
  o.engine.min_shared_prompt_tokens = absl::GetFlag(FLAGS_min_shared_prompt_tokens);
  o.engine.max_queued_per_tenant = absl::GetFlag(FLAGS_max_queued_per_tenant);
  o.engine.batch_reserved_running = absl::GetFlag(FLAGS_batch_reserved_running);
  o.engine.max_running_batch = absl::GetFlag(FLAGS_max_batch_running);
  o.batch.max_prompts = absl::GetFlag(FLAGS_max_batch_prompts);
  o.batch.runner.kv_fraction = absl::GetFlag(FLAGS_batch_kv_fraction);
  if (o.batch.max_prompts <= 0 || !(o.batch.runner.kv_fraction > 0 && o.batch.runner.kv_fraction <= 1)) {
    std::fprintf(stderr, "--max_batch_prompts must be positive and --batch_kv_fraction in (0, 1]\n");
    return false;
  }
  auto overflow = engine::ParseContextOverflow(absl::GetFlag(FLAGS_context_overflow));
  if (!overflow.ok()) {
    std::fprintf(stderr, "--context_overflow: %s\n", std::string(overflow.status().message()).c_str());
    return false;
  }
  o.engine.context_window.overflow = *overflow;
  o.engine.context_window.ratio = absl::GetFlag(FLAGS_context_truncation_ratio);
  o.engine.context_window.reuse_kept_kv = absl::GetFlag(FLAGS_context_truncation_reuse);
  o.engine.max_context = absl::GetFlag(FLAGS_max_context);
  o.system_prompts_file = absl::GetFlag(FLAGS_system_prompts_file);
  auto keys = LoadApiKeys();
  if (!keys.ok()) {
    std::fprintf(stderr, "%s\n", std::string(keys.status().message()).c_str());
    return false;
  }
  o.api_keys = *std::move(keys);
  o.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  o.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  o.admin_tenant = absl::GetFlag(FLAGS_admin_tenant);
  if (absl::GetFlag(FLAGS_drain_seconds) < 0) {
    std::fprintf(stderr, "--drain_seconds must be >= 0\n");
    return false;
  }
  o.drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_seconds));
  o.max_rpc_threads = absl::GetFlag(FLAGS_max_rpc_threads);
  return true;
}

void WritePortFile(const std::string& path, int port, int metrics_port) {
  const std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%d %d\n", port, metrics_port);
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

}  // namespace

int ServeCommand() {
  ServerOptions o;
  if (!OptionsFromFlags(o)) return 2;
  CpuIdlePollers pollers;
  if (absl::Status s = pollers.Start(absl::GetFlag(FLAGS_cpu_idle_poll_threads)); !s.ok()) {
    std::fprintf(stderr, "--cpu_idle_poll_threads: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto server = StrataServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "strata serve: %s\n", server.status().ToString().c_str());
    return 1;
  }
  {
    // What is running, for dashboards: always 1, the facts in its labels.
    const model::ModelBackend& m = (*server)->engine().model();
    (*server)->registry()
        .AddGauge("strata_build_info", "strata's version, commit and build, the model and device it serves (1).")
        .WithLabels({{"version", Version()},
                     {"commit", GitCommit()},
                     {"flavor", BuildFlavor()},
                     {"model", o.model.model.empty() ? "builtin" : o.model.model},
                     {"fingerprint", absl::StrFormat("%016x", m.fingerprint())},
                     {"device", m.name()}})
        .Set(1);
  }
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    WritePortFile(path, (*server)->port(), (*server)->metrics_port());
  }
  // SIGINT/SIGTERM (blocked in every thread by main): shut down from a thread that may
  // block. SIGHUP: reload the API keys.
  StrataServer* s = server->get();
  std::thread([s] {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    for (;;) {
      int sig = 0;
      sigwait(&signals, &sig);
      if (sig == SIGHUP) {
        auto keys = LoadApiKeys();
        absl::Status reloaded = keys.ok() ? s->ReloadApiKeys(*std::move(keys)) : keys.status();
        if (!reloaded.ok()) LOG(ERROR) << "SIGHUP: the API keys stay as they were: " << reloaded.message();
        continue;
      }
      LOG(INFO) << "signal " << sig << ": shutting down";
      s->Shutdown();
      return;
    }
  }).detach();
  (*server)->Wait();
  return 0;
}

}  // namespace strata::server::cli
