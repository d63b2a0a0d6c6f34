#include "server/strata_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <optional>

#include "base/log.h"
#include "absl/strings/str_cat.h"
#include "text/tokenizer_loader.h"
#include "server/cache_service.h"
#include "server/chat_service.h"

namespace strata::server {

absl::Status ServerOptions::Validate() const {
  if (listen_address.empty()) return absl::InvalidArgumentError("listen address is empty");
  if (host_cache_bytes < 0) return absl::InvalidArgumentError("--host_cache_bytes must be >= 0");
  if (ttl <= absl::ZeroDuration()) return absl::InvalidArgumentError("--ttl_seconds must be positive");
  if (chunk_tokens <= 0 || chunk_tokens > 65536) {
    return absl::InvalidArgumentError("--chunk_tokens must be in 1..65536");
  }
  if (absl::Status s = backend.Validate(); !s.ok()) return s;
  return engine.Validate();
}

namespace {

// Mirrors the session store's own statistics into gauges and counters at scrape time.
void ExportStoreStats(metrics::Registry& r, storage::SessionStore* store, bool cache_enabled) {
  auto& tier_bytes = r.AddGauge("strata_tier_bytes", "Bytes held in each tier.");
  auto& tier_capacity = r.AddGauge("strata_tier_capacity_bytes", "Capacity of each tier (0: off).");
  auto& sessions = r.AddGauge("strata_sessions", "Sessions with KV held in each tier.");
  auto& evictions = r.AddCounter("strata_cache_evictions_total",
                                 "Sessions that left the store for room, by reason (host_full: not yet on SSD; "
                                 "ssd_full: held only on SSD).");
  auto& prefetches = r.AddCounter("strata_prefetches_total",
                                  "Look-ahead prefetches (SSD to host) by outcome: started, in_time (on host when "
                                  "the turn came), late (the turn waited for it), wasted (left host unused).");
  auto& lookahead = r.AddGauge("strata_lookahead_sessions",
                               "Sessions in the placement look-ahead (queued turns and gateway hints).");
  auto& demotions = r.AddCounter("strata_cache_demotions_total",
                                 "Host copies dropped under pressure (the session stays on SSD).");
  auto& promotions = r.AddCounter("strata_cache_promotions_total",
                                  "Sessions read back from SSD into host memory, by outcome.");
  auto& moved = r.AddCounter("strata_bytes_moved_total", "Bytes moved between tiers, by direction.");
  auto& persisted = r.AddCounter("strata_cache_persisted_total",
                                 "Write-backs that made a session durable (chunks synced, index committed).");
  auto& ssd_errors = r.AddCounter("strata_ssd_write_errors_total", "SSD write, sync or index failures.");
  auto& degraded = r.AddGauge("strata_ssd_degraded", "1 when the SSD tier failed and caching is host-only.");
  auto& rejected = r.AddCounter("strata_cache_save_rejected_total",
                                "Sessions too large for the tier, not stored.");
  auto& corrupt = r.AddCounter("strata_cache_corrupt_chunks_total",
                               "Chunks that failed their checksum or fingerprint (served as misses).");
  auto& expired = r.AddCounter("strata_cache_expired_total", "Sessions dropped by TTL.");
  auto& io_seconds = r.AddHistogram(
      "strata_tier_io_seconds",
      "Latency of tier I/O: host = a session's chunk copies in or out of the arena, ssd = one "
      "chunk request from submission to completion.",
      {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1});
  auto& enabled = r.AddGauge("strata_cache_enabled", "1 when the session cache is on.");
  enabled.WithLabels({}).Set(cache_enabled ? 1 : 0);
  auto sync = [](metrics::Counter& c, int64_t total) {
    double delta = static_cast<double>(total) - c.Value();
    if (delta > 0) c.Increment(delta);
  };
  r.AddCollector([=, &tier_bytes, &tier_capacity, &sessions, &evictions, &prefetches, &lookahead, &demotions,
                  &promotions,
                  &moved, &persisted, &ssd_errors, &degraded, &rejected, &corrupt, &expired, &io_seconds] {
    storage::SessionStoreStats s;
    if (store != nullptr) {
      s = store->Stats();
      for (const storage::TierIoSample& io : store->TakeIoSamples()) {
        io_seconds.WithLabels({{"tier", storage::TierName(io.tier)}, {"op", io.write ? "write" : "read"}})
            .Observe(io.seconds);
      }
    }
    tier_bytes.WithLabels({{"tier", "hbm"}}).Set(0);
    tier_capacity.WithLabels({{"tier", "hbm"}}).Set(0);
    sessions.WithLabels({{"tier", "hbm"}}).Set(0);
    tier_bytes.WithLabels({{"tier", "host"}}).Set(static_cast<double>(s.host_used_bytes));
    tier_capacity.WithLabels({{"tier", "host"}}).Set(static_cast<double>(s.host_capacity_bytes));
    sessions.WithLabels({{"tier", "host"}}).Set(static_cast<double>(s.host_sessions));
    tier_bytes.WithLabels({{"tier", "ssd"}}).Set(static_cast<double>(s.ssd_used_bytes));
    tier_capacity.WithLabels({{"tier", "ssd"}}).Set(static_cast<double>(s.ssd_capacity_bytes));
    sessions.WithLabels({{"tier", "ssd"}}).Set(static_cast<double>(s.ssd_sessions));
    sync(evictions.WithLabels({{"reason", "host_full"}}), s.evictions_host_full);
    sync(evictions.WithLabels({{"reason", "ssd_full"}}), s.evictions_ssd_full);
    sync(prefetches.WithLabels({{"outcome", "started"}}), s.prefetches);
    sync(prefetches.WithLabels({{"outcome", "in_time"}}), s.prefetch_in_time);
    sync(prefetches.WithLabels({{"outcome", "late"}}), s.prefetch_late);
    sync(prefetches.WithLabels({{"outcome", "wasted"}}), s.prefetch_wasted);
    lookahead.WithLabels({}).Set(static_cast<double>(s.lookahead_sessions));
    sync(demotions.WithLabels({}), s.demotions);
    sync(promotions.WithLabels({{"outcome", "ok"}}), s.promotions);
    sync(promotions.WithLabels({{"outcome", "failed"}}), s.promotion_failures);
    sync(moved.WithLabels({{"direction", "host_to_ssd"}}), s.ssd_bytes_written);
    sync(moved.WithLabels({{"direction", "ssd_to_host"}}), s.ssd_bytes_read);
    sync(persisted.WithLabels({}), s.persisted_saves);
    sync(ssd_errors.WithLabels({}), s.ssd_write_errors);
    degraded.WithLabels({}).Set(s.ssd_degraded ? 1 : 0);
    sync(rejected.WithLabels({}), s.save_rejected);
    sync(corrupt.WithLabels({}), s.corrupt_chunks);
    sync(expired.WithLabels({}), s.expired);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<StrataServer>> StrataServer::Start(const ServerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::unique_ptr<StrataServer> server(new StrataServer());
  server->options_ = options;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::optional<model::ModelWeights> model_weights;
  if (options.model_dir.empty()) {
    auto bytes = std::make_unique<text::ByteTokenizer>();
    model_weights.emplace(
        model::ModelWeights::Random(model::ModelConfig::Builtin(), options.model_seed, bytes->SilentTokens()));
    tokenizer = std::move(bytes);
  } else {
    auto weights = model::ModelWeights::LoadDirectory(options.model_dir);
    if (!weights.ok()) return weights.status();
    const model::ModelConfig& c = weights->config();
    LOG(INFO) << "model " << options.model_dir << ": " << c.architecture << ", " << c.num_layers << " layers, hidden "
              << c.hidden_size << ", " << weights->parameter_count() << " parameters";
    if (text::HasTokenizerFile(options.model_dir)) {
      std::string note;
      auto loaded = text::LoadTokenizer(options.model_dir, &note);
      if (!loaded.ok()) return loaded.status();
      LOG(INFO) << note;
      tokenizer = *std::move(loaded);
    } else {
      LOG(WARNING) << "no tokenizer.json in " << options.model_dir
                   << " (a tokenizer.model alone is not read): Chat takes token_ids only (messages are refused)";
      tokenizer = std::make_unique<text::TokenIdsOnlyTokenizer>(c.vocab_size, c.eos_token_ids);
    }
    model_weights.emplace(*std::move(weights));
  }
  auto backend = model::CreateBackend(*std::move(model_weights), options.backend);
  if (!backend.ok()) return backend.status();
  std::unique_ptr<model::ModelBackend> model = *std::move(backend);
  LOG(INFO) << "model backend: " << model->name()
            << (model->name() == "cuda" ? " (bf16 weights and KV in GPU memory)" : " (fp32, CPU reference)");
  const uint64_t fingerprint = model->fingerprint();
  if (options.cache_enabled) {
    storage::SessionStoreOptions so;
    so.host_capacity_bytes = options.host_cache_bytes;
    so.layout = model::ChunkLayoutFor(*model, options.chunk_tokens);
    so.model_fingerprint = fingerprint;
    so.ssd_dirs = options.ssd_dirs;
    so.ssd_capacity_bytes_per_dir = options.ssd_capacity_bytes_per_dir;
    so.index_dir = options.index_dir;
    if (so.index_dir.empty() && !so.ssd_dirs.empty()) so.index_dir = so.ssd_dirs[0] + "/index";
    so.ttl = options.ttl;
    so.lock_host_memory = options.pin_host_memory;
    so.placement = options.placement;
    auto store = storage::SessionStore::Create(so);
    if (!store.ok()) return store.status();
    server->store_ = *std::move(store);
    LOG(INFO) << "session cache on: host tier " << options.host_cache_bytes << " bytes, chunks of "
              << options.chunk_tokens << " tokens (" << so.layout.BlockBytes() << " bytes)";
    if (so.ssd_dirs.empty()) {
      LOG(WARNING) << "SSD tier OFF (no --ssd_dirs): sessions live in host memory only and do not "
                      "survive a restart";
    } else {
      LOG(INFO) << "SSD tier on: " << so.ssd_dirs.size() << " director" << (so.ssd_dirs.size() == 1 ? "y" : "ies")
                << " of " << so.ssd_capacity_bytes_per_dir << " bytes, index in " << so.index_dir;
    }
  } else {
    LOG(WARNING) << "session cache OFF (--cache=off): every turn recomputes its whole prompt";
  }
  ExportStoreStats(server->registry_, server->store_.get(), options.cache_enabled);
  auto engine = engine::Engine::Create(options.engine, std::move(model), tokenizer.get(),
                                       server->store_.get(), &server->registry_);
  if (!engine.ok()) return engine.status();
  server->tokenizer_ = std::move(tokenizer);
  server->engine_ = *std::move(engine);

  auto requests = std::make_shared<RequestCounter>(server->registry_);
  server->requests_ = requests;
  server->chat_service_ = std::make_unique<ChatServiceImpl>(
      server->engine_.get(), server->tokenizer_.get(), server->store_.get(), &server->options_.api_keys,
      requests.get());
  server->cache_service_ = std::make_unique<CacheServiceImpl>(
      server->store_.get(), fingerprint, &server->options_.api_keys, requests.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->chat_service_.get());
  builder.RegisterService(server->cache_service_.get());
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address));
  }
  if (!options.metrics_address.empty()) {
    auto exposer = metrics::MetricsExposer::Start(options.metrics_address, &server->registry_);
    if (!exposer.ok()) return exposer.status();
    server->exposer_ = *std::move(exposer);
  }
  LOG(INFO) << "strata serving gRPC on port " << server->port_ << ", metrics on port "
            << server->metrics_port() << "; model fingerprint " << std::hex << fingerprint;
  return server;
}

void StrataServer::Wait() {
  if (grpc_server_) grpc_server_->Wait();
}

void StrataServer::Shutdown() {
  if (grpc_server_) grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

StrataServer::~StrataServer() {
  Shutdown();
  // The engine ends its turns before the services that stream them go away.
  engine_.reset();
  grpc_server_.reset();
}

}  // namespace strata::server
