// StrataServer: the strata gRPC services, the engine and the session cache, wired up and
// listening. `strata serve` is one of these; tests and benchmarks start them in-process.
#ifndef STRATA_SERVER_STRATA_SERVER_H_
#define STRATA_SERVER_STRATA_SERVER_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"

#include "absl/status/statusor.h"
#include "base/metrics.h"
#include "base/metrics_exposer.h"
#include "base/metrics_history.h"
#include "engine/engine.h"
#include "engine/served_model.h"
#include "server/auth.h"
#include "server/batch_service.h"
#include "server/prompt_builder.h"
#include "server/system_prompts.h"
#include "storage/session_store.h"
#include "text/tokenizer.h"

namespace grpc {
class Server;
class Service;
}

namespace strata::server {

// Batch prompts running at once on the GPU by default (EngineOptions::max_running_batch).
inline constexpr int kGpuBatchRunning = 256;

// The fewest gRPC threads a server takes (--max_rpc_threads): its pollers and a call.
inline constexpr int kMinRpcThreads = 4;

struct ServerOptions {
  std::string listen_address = "127.0.0.1:7070";   // gRPC; port 0 picks a free port
  std::string metrics_address = "127.0.0.1:9464";  // Prometheus /metrics and the status page; empty: off
  // How often the status page's history (server/status_page.h) samples the metrics it
  // plots; it keeps 180 samples (15 minutes at 5 s).
  absl::Duration status_sample_interval = absl::Seconds(5);
  // Shutdown: how long running turns (and their write-backs) may take to finish before
  // the remaining streams are cancelled.
  absl::Duration drain_timeout = absl::Seconds(30);
  // Threads the gRPC server may run calls on (grpc::ResourceQuota): each running Chat or
  // other call, and each open ChatSession stream, holds one; a call past it gets
  // RESOURCE_EXHAUSTED at once, so a flood of streams costs calls, not the process.
  int max_rpc_threads = 2048;
  bool cache_enabled = true;
  // The session cache: host tier, SSD tier and index, TTL, placement, chunk size
  // (layout.chunk_tokens; the rest of the layout and the fingerprint come from the model;
  // index_dir defaults to <first ssd dir>/index).
  storage::SessionStoreOptions store = DefaultStoreOptions();
  // Which model (built-in, random:NAME or a directory) on which device.
  engine::ServedModelOptions model;
  // max_running_batch -1: kGpuBatchRunning on the GPU, 0 on the CPU.
  engine::EngineOptions engine;
  // API key -> tenant (and admin). Empty: no authentication, every caller is tenant
  // "default". ReloadApiKeys replaces them while serving (server/auth.h).
  std::map<std::string, ApiKey> api_keys;
  // TLS on the gRPC port (PEM files; empty: plaintext). With tls_client_ca_file, clients
  // must present a certificate that CA signed (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // A tenant whose CacheService.Stats covers every tenant (an operator's key); empty:
  // none, each caller sees its own tenant only.
  std::string admin_tenant;
  // Where registered system prompts are kept across restarts; "" (default) with an SSD
  // tier: <first ssd dir>/system_prompts.json; without one they live in memory only.
  std::string system_prompts_file;
  // BatchService: the prompts a call may send, and how batches share the KV memory.
  BatchServiceOptions batch;

  absl::Status Validate() const;
  // The store's defaults with the server's: 256-token chunks, a locked host arena.
  static storage::SessionStoreOptions DefaultStoreOptions();
};

class StrataServer {
 public:
  // Builds the model, engine and session cache and starts listening. Unavailable when a
  // port cannot be bound; InvalidArgument when the options do not validate.
  static absl::StatusOr<std::unique_ptr<StrataServer>> Start(const ServerOptions& options);
  // Stops accepting calls, ends running turns, and stops.
  ~StrataServer();

  int port() const { return port_; }
  int metrics_port() const { return exposer_ ? exposer_->port() : 0; }
  // Blocks until Shutdown() (from another thread or a signal handler thread).
  void Wait();
  // Graceful: health goes NOT_SERVING, new turns are refused (UNAVAILABLE), running and
  // queued turns finish within drain_timeout, queued SSD write-backs are done, then the
  // gRPC server stops. Safe to call more than once (the later calls wait for the first).
  void Shutdown();

  engine::Engine& engine() { return *engine_; }
  storage::SessionStore* store() { return store_.get(); }
  metrics::Registry& registry() { return registry_; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  // Replaces the API keys for calls that start from now on (SIGHUP). InvalidArgument,
  // nothing changed, when keys were required and `keys` is empty, or the admin tenant
  // has no key.
  absl::Status ReloadApiKeys(std::map<std::string, ApiKey> keys);

 private:
  StrataServer() = default;

  ServerOptions options_;
  ApiKeys api_keys_;
  metrics::Registry registry_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<storage::SessionStore> store_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<grpc::Service> chat_service_;
  std::unique_ptr<grpc::Service> cache_service_;
  std::unique_ptr<SystemPromptRegistry> prompts_;
  std::unique_ptr<grpc::Service> prompt_service_;
  std::unique_ptr<PromptBuilder> batch_prompts_;
  std::unique_ptr<grpc::Service> batch_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::once_flag shutdown_once_;
  // Both read registry_, whose collectors read store_: they go first (declared last).
  std::unique_ptr<metrics::MetricsHistory> status_history_;
  std::unique_ptr<metrics::MetricsExposer> exposer_;  // uses status_history_
  int port_ = 0;
};

}  // namespace strata::server

#endif  // STRATA_SERVER_STRATA_SERVER_H_
