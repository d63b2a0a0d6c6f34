#include "server/strata_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "base/log.h"
#include "absl/strings/str_cat.h"
#include "server/cache_service.h"
#include "server/chat_service.h"

namespace strata::server {

absl::Status ServerOptions::Validate() const {
  if (listen_address.empty()) return absl::InvalidArgumentError("listen address is empty");
  if (host_cache_bytes < 0) return absl::InvalidArgumentError("--host_cache_bytes must be >= 0");
  if (chunk_tokens <= 0 || chunk_tokens > 65536) {
    return absl::InvalidArgumentError("--chunk_tokens must be in 1..65536");
  }
  return engine.Validate();
}

namespace {

// Mirrors the session store's own statistics into gauges and counters at scrape time.
void ExportStoreStats(metrics::Registry& r, storage::SessionStore* store, bool cache_enabled) {
  auto& tier_bytes = r.AddGauge("strata_tier_bytes", "Bytes held in each tier.");
  auto& tier_capacity = r.AddGauge("strata_tier_capacity_bytes", "Capacity of each tier (0: off).");
  auto& sessions = r.AddGauge("strata_sessions", "Sessions with KV held in each tier.");
  auto& evictions = r.AddCounter("strata_cache_evictions_total", "Sessions evicted, by tier.");
  auto& rejected = r.AddCounter("strata_cache_save_rejected_total",
                                "Sessions too large for the tier, not stored.");
  auto& corrupt = r.AddCounter("strata_cache_corrupt_chunks_total",
                               "Chunks that failed their checksum or fingerprint (served as misses).");
  auto& enabled = r.AddGauge("strata_cache_enabled", "1 when the session cache is on.");
  enabled.WithLabels({}).Set(cache_enabled ? 1 : 0);
  auto sync = [](metrics::Counter& c, int64_t total) {
    double delta = static_cast<double>(total) - c.Value();
    if (delta > 0) c.Increment(delta);
  };
  r.AddCollector([=, &tier_bytes, &tier_capacity, &sessions, &evictions, &rejected, &corrupt] {
    storage::SessionStoreStats s;
    if (store != nullptr) s = store->Stats();
    for (const char* tier : {"hbm", "host", "ssd"}) {
      bool host = std::string_view(tier) == "host";
      tier_bytes.WithLabels({{"tier", tier}}).Set(host ? static_cast<double>(s.host_used_bytes) : 0);
      tier_capacity.WithLabels({{"tier", tier}}).Set(host ? static_cast<double>(s.host_capacity_bytes) : 0);
      sessions.WithLabels({{"tier", tier}}).Set(host ? static_cast<double>(s.sessions) : 0);
    }
    sync(evictions.WithLabels({{"tier", "host"}}), s.evictions);
    sync(rejected.WithLabels({}), s.save_rejected);
    sync(corrupt.WithLabels({}), s.corrupt_chunks);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<StrataServer>> StrataServer::Start(const ServerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::unique_ptr<StrataServer> server(new StrataServer());
  server->options_ = options;
  auto tokenizer = std::make_unique<engine::ByteTokenizer>();
  engine::ModelConfig config = engine::ModelConfig::Builtin();
  auto model = std::make_unique<engine::CpuModel>(
      engine::ModelWeights::Random(config, options.model_seed, tokenizer->SilentTokens()));
  const uint64_t fingerprint = model->weights().fingerprint();
  if (options.cache_enabled) {
    storage::SessionStoreOptions so;
    so.host_capacity_bytes = options.host_cache_bytes;
    so.layout = engine::Engine::ChunkLayoutFor(config, options.chunk_tokens);
    so.model_fingerprint = fingerprint;
    auto store = storage::SessionStore::Create(so);
    if (!store.ok()) return store.status();
    server->store_ = *std::move(store);
    LOG(INFO) << "session cache on: host tier " << options.host_cache_bytes << " bytes, chunks of "
              << options.chunk_tokens << " tokens (" << so.layout.BlockBytes() << " bytes)";
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
      server->engine_.get(), server->tokenizer_.get(), &server->options_.api_keys, requests.get());
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
