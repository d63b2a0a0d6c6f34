#include "server/strata_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/log.h"
#include "base/process_metrics.h"
#include "absl/strings/str_cat.h"
#include "engine/served_model.h"
#include "storage/session_store_metrics.h"
#include "server/cache_service.h"
#include "server/chat_service.h"
#include "server/port_check.h"
#include "server/status_page.h"
#include "server/system_prompt_service.h"
#include "server/request_metrics.h"

namespace strata::server {

storage::SessionStoreOptions ServerOptions::DefaultStoreOptions() {
  storage::SessionStoreOptions o;
  o.layout.chunk_tokens = 256;
  o.ssd_capacity_bytes_per_dir = int64_t{16} << 30;
  o.lock_host_memory = true;
  return o;
}

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  return text.str();
}

// Plaintext, TLS, or mutual TLS (a client certificate the CA signed is required).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const ServerOptions& o) {
  if (o.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  auto cert = ReadPem(o.tls_cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(o.tls_key_file, "--tls_key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!o.tls_client_ca_file.empty()) {
    auto ca = ReadPem(o.tls_client_ca_file, "--tls_client_ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  LOG(INFO) << (o.tls_client_ca_file.empty() ? "TLS" : "mutual TLS") << " on the gRPC port";
  return grpc::SslServerCredentials(ssl);
}

// --admin_tenant must name the tenant of at least one key.
absl::Status CheckAdminTenantHasAKey(const std::string& admin_tenant, const std::map<std::string, ApiKey>& keys) {
  if (admin_tenant.empty() ||
      std::any_of(keys.begin(), keys.end(), [&](const auto& kv) { return kv.second.tenant == admin_tenant; })) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--admin_tenant '", admin_tenant, "' is the tenant of no API key"));
}

// What the tenant quotas are; a tenant --tenant_quotas names that no API key has is most
// likely a typo (keys reloaded later may add it, so it is only a warning).
void LogTenantQuotas(const storage::SessionStoreOptions& so, const std::map<std::string, ApiKey>& keys) {
  const storage::TenantQuota& q = so.tenant_quota;
  if (q.host_bytes > 0 || q.ssd_bytes > 0 || !so.tenant_quotas.empty()) {
    LOG(INFO) << "tenant quotas: every tenant host " << q.host_bytes << " bytes, SSD " << q.ssd_bytes
              << " bytes (0: none); " << so.tenant_quotas.size() << " tenants with their own (--tenant_quotas)";
  }
  for (const auto& [tenant, quota] : so.tenant_quotas) {
    const bool known = keys.empty() ? tenant == kDefaultTenant
                                    : std::any_of(keys.begin(), keys.end(),
                                                  [&](const auto& kv) { return kv.second.tenant == tenant; });
    if (!known) LOG(WARNING) << "--tenant_quotas names tenant '" << tenant << "', which no API key has";
  }
}

}  // namespace

absl::Status ServerOptions::Validate() const {
  if (listen_address.empty()) return absl::InvalidArgumentError("listen address is empty");
  if (max_rpc_threads < kMinRpcThreads) {
    return absl::InvalidArgumentError(absl::StrCat("--max_rpc_threads must be at least ", kMinRpcThreads));
  }
  if (store.host_capacity_bytes < 0) return absl::InvalidArgumentError("--host_cache_bytes must be >= 0");
  if (store.ttl <= absl::ZeroDuration()) return absl::InvalidArgumentError("--ttl_seconds must be positive");
  if (store.tenant_quota.host_bytes < 0 || store.tenant_quota.ssd_bytes < 0) {
    return absl::InvalidArgumentError("--tenant_host_quota_bytes and --tenant_ssd_quota_bytes must be >= 0");
  }
  if (store.layout.chunk_tokens <= 0 || store.layout.chunk_tokens > 65536) {
    return absl::InvalidArgumentError("--chunk_tokens must be in 1..65536");
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!tls_client_ca_file.empty() && tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca (mutual TLS) needs --tls_cert and --tls_key");
  }
  if (absl::Status s = CheckAdminTenantHasAKey(admin_tenant, api_keys); !s.ok()) return s;
  if (absl::Status s = StatusHistoryOptions(status_sample_interval).Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--status_sample_seconds: ", s.message()));
  }
  if (absl::Status s = model.backend.Validate(); !s.ok()) return s;
  engine::EngineOptions e = engine;
  if (e.max_running_batch == -1) e.max_running_batch = 0;  // chosen by the backend at start
  return e.Validate();
}

absl::StatusOr<std::unique_ptr<StrataServer>> StrataServer::Start(const ServerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  // Ports first: one clear message at once, before the model loads or host memory is locked.
  for (const std::string& address : {options.listen_address, options.metrics_address}) {
    if (address.empty()) continue;
    if (absl::Status s = CheckPortFree(address); !s.ok()) return s;
  }
  std::unique_ptr<StrataServer> server(new StrataServer());
  server->options_ = options;
  server->api_keys_.Replace(options.api_keys);
  auto served = engine::LoadServedModel(options.model);
  if (!served.ok()) return served.status();
  LOG(INFO) << "model: " << served->description;
  std::unique_ptr<text::Tokenizer> tokenizer = std::move(served->tokenizer);
  std::unique_ptr<model::ModelBackend> model = std::move(served->backend);
  LOG(INFO) << "model backend: " << model->name()
            << (model->name() == "cuda" ? " (bf16 weights and KV in GPU memory)" : " (fp32, CPU reference)");
  const uint64_t fingerprint = model->fingerprint();
  if (options.cache_enabled) {
    storage::SessionStoreOptions so = options.store;
    so.layout = model::ChunkLayoutFor(*model, options.store.layout.chunk_tokens);
    so.model_fingerprint = fingerprint;
    if (so.index_dir.empty() && !so.ssd_dirs.empty()) so.index_dir = so.ssd_dirs[0] + "/index";
    auto store = storage::SessionStore::Create(so);
    if (!store.ok()) return store.status();
    server->store_ = *std::move(store);
    LOG(INFO) << "session cache on: host tier " << so.host_capacity_bytes << " bytes, chunks of "
              << so.layout.chunk_tokens << " tokens (" << so.layout.BlockBytes() << " bytes)";
    LogTenantQuotas(so, options.api_keys);
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
  storage::TenantsFn tenants;
  if (options.engine.metrics_tenant_label) {
    // The API keys' tenants (as keys are reloaded): a bounded set, never a client's choice.
    ApiKeys* keys = &server->api_keys_;
    tenants = [keys] {
      std::vector<std::string> t = keys->tenants();
      if (keys->empty()) t.push_back(kDefaultTenant);
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      return t;
    };
  }
  storage::ExportSessionStoreMetrics(server->registry_, server->store_.get(), options.cache_enabled,
                                     std::move(tenants));
  metrics::ExportProcessMetrics(server->registry_);
  engine::EngineOptions engine_options = options.engine;
  if (engine_options.max_running_batch < 0) {
    // A GPU decode step costs about the same for 64 rows as for 256 (it reads the weights):
    // batch prompts get a wide pool of their own there; on the CPU rows cost time, so they
    // share the chat turns'.
    engine_options.max_running_batch = model->name() == "cuda" ? kGpuBatchRunning : 0;
  }
  auto engine = engine::Engine::Create(engine_options, std::move(model), tokenizer.get(),
                                       server->store_.get(), &server->registry_);
  if (!engine.ok()) return engine.status();
  server->tokenizer_ = std::move(tokenizer);
  server->engine_ = *std::move(engine);

  std::string prompts_file = options.system_prompts_file;
  if (prompts_file.empty() && options.cache_enabled && !options.store.ssd_dirs.empty()) {
    prompts_file = options.store.ssd_dirs[0] + "/system_prompts.json";
  }
  auto prompts = SystemPromptRegistry::Open(prompts_file, fingerprint);
  if (!prompts.ok()) return prompts.status();
  server->prompts_ = *std::move(prompts);
  server->chat_service_ =
      std::make_unique<ChatServiceImpl>(server->engine_.get(), server->tokenizer_.get(), server->store_.get(),
                                        server->prompts_.get(), &server->api_keys_);
  server->prompt_service_ = std::make_unique<SystemPromptServiceImpl>(
      server->engine_.get(), server->tokenizer_.get(), server->prompts_.get(), &server->api_keys_);
  server->batch_prompts_ =
      std::make_unique<PromptBuilder>(server->engine_.get(), server->tokenizer_.get(), server->prompts_.get());
  server->batch_service_ = std::make_unique<BatchServiceImpl>(server->engine_.get(), server->batch_prompts_.get(),
                                                              &server->api_keys_, &server->registry_, options.batch);
  server->cache_service_ = std::make_unique<CacheServiceImpl>(
      server->store_.get(), fingerprint, &server->api_keys_, server->options_.admin_tenant);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  auto credentials = ServerCredentials(options);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(options.listen_address, *credentials, &server->port_);
  // The port is this server's alone: gRPC would otherwise share it (SO_REUSEPORT) with a
  // second strata, silently splitting sessions between two caches.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("strata");
  quota.SetMaxThreads(options.max_rpc_threads);
  builder.SetResourceQuota(quota);
  builder.RegisterService(server->chat_service_.get());
  builder.RegisterService(server->cache_service_.get());
  builder.RegisterService(server->prompt_service_.get());
  builder.RegisterService(server->batch_service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(RequestMetricsInterceptor(server->registry_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address));
  }
  // Health per service as well as the server's ("").
  if (grpc::HealthCheckServiceInterface* health = server->grpc_server_->GetHealthCheckService()) {
    health->SetServingStatus(v1::ChatService::service_full_name(), true);
    health->SetServingStatus(v1::CacheService::service_full_name(), true);
    health->SetServingStatus(v1::SystemPromptService::service_full_name(), true);
    health->SetServingStatus(v1::BatchService::service_full_name(), true);
  }
  if (!options.metrics_address.empty()) {
    server->status_history_ = std::make_unique<metrics::MetricsHistory>(
        &server->registry_, StatusHistoryOptions(options.status_sample_interval));
    server->status_history_->StartSampling();
    auto exposer = metrics::MetricsExposer::Start(options.metrics_address, &server->registry_,
                                                  StatusPages(&server->registry_, server->status_history_.get()));
    if (!exposer.ok()) return exposer.status();
    server->exposer_ = *std::move(exposer);
  }
  LOG(INFO) << "strata serving gRPC on port " << server->port_ << ", metrics on port " << server->metrics_port()
            << " (/metrics, and a status page at /); model fingerprint " << std::hex << fingerprint;
  return server;
}

absl::Status StrataServer::ReloadApiKeys(std::map<std::string, ApiKey> keys) {
  if (!options_.api_keys.empty() && keys.empty()) {
    return absl::InvalidArgumentError("the new key list is empty: it would turn authentication off");
  }
  if (absl::Status s = CheckAdminTenantHasAKey(options_.admin_tenant, keys); !s.ok()) return s;
  LOG(INFO) << "API keys reloaded: " << keys.size() << " keys";
  api_keys_.Replace(std::move(keys));
  return absl::OkStatus();
}

void StrataServer::Wait() {
  if (grpc_server_) grpc_server_->Wait();
}

void StrataServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (grpc_server_ == nullptr) return;
    const absl::Time deadline = absl::Now() + options_.drain_timeout;
    if (grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService()) {
      health->Shutdown();  // every service NOT_SERVING: load balancers stop sending turns
    }
    if (engine_ != nullptr) {
      engine_->Drain();
      if (!engine_->AwaitIdle(deadline - absl::Now())) {
        LOG(WARNING) << "shutdown: turns still running after " << options_.drain_timeout << "; they are cancelled";
      }
    }
    if (store_ != nullptr) {
      if (absl::Status s = store_->AwaitWriteBacks(std::max(deadline - absl::Now(), absl::Seconds(1))); !s.ok()) {
        LOG(WARNING) << "shutdown: " << s.message() << "; their sessions are not persisted";
      }
    }
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    LOG(INFO) << "shutdown complete";
  });
}

StrataServer::~StrataServer() {
  Shutdown();
  // Nothing scrapes the registry any more: its collectors read the engine's model, which
  // goes next.
  exposer_.reset();
  status_history_.reset();
  // The engine ends its turns before the services that stream them go away.
  engine_.reset();
  grpc_server_.reset();
}

}  // namespace strata::server
