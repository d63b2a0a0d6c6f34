// StrataServer: the strata gRPC services, the engine and the session cache, wired up and
// listening. `strata serve` is one of these; tests and benchmarks start them in-process.
#ifndef STRATA_SERVER_STRATA_SERVER_H_
#define STRATA_SERVER_STRATA_SERVER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

#include "absl/status/statusor.h"
#include "base/metrics.h"
#include "base/metrics_exposer.h"
#include "model/backend.h"
#include "engine/engine.h"
#include "text/tokenizer.h"
#include "storage/session_store.h"

namespace grpc {
class Server;
class Service;
}

namespace strata::server {

struct ServerOptions {
  std::string listen_address = "127.0.0.1:7070";   // gRPC; port 0 picks a free port
  std::string metrics_address = "127.0.0.1:9464";  // Prometheus /metrics; empty: off
  bool cache_enabled = true;
  int64_t host_cache_bytes = int64_t{1} << 30;
  bool pin_host_memory = true;  // lock the host arena in memory
  int chunk_tokens = 256;
  // SSD tier (off when empty) and its RocksDB index (default: <first ssd dir>/index).
  std::vector<std::string> ssd_dirs;
  int64_t ssd_capacity_bytes_per_dir = int64_t{16} << 30;
  std::string index_dir;
  absl::Duration ttl = absl::Hours(24);
  storage::PlacementPolicy placement = storage::PlacementPolicy::kSchedulerAware;
  uint64_t model_seed = 20241122;  // seed of the built-in model's weights
  // A Hugging Face model directory (config.json + *.safetensors); empty: the built-in model.
  std::string model_dir;
  model::BackendOptions backend;  // --device and the GPU KV pool
  engine::EngineOptions engine;
  // API key -> tenant. Empty: no authentication, every caller is tenant "default".
  std::map<std::string, std::string> api_keys;

  absl::Status Validate() const;
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
  void Shutdown();

  engine::Engine& engine() { return *engine_; }
  storage::SessionStore* store() { return store_.get(); }
  metrics::Registry& registry() { return registry_; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  StrataServer() = default;

  ServerOptions options_;
  metrics::Registry registry_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<storage::SessionStore> store_;
  std::unique_ptr<engine::Engine> engine_;
  std::shared_ptr<class RequestCounter> requests_;
  std::unique_ptr<grpc::Service> chat_service_;
  std::unique_ptr<grpc::Service> cache_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<metrics::MetricsExposer> exposer_;
  int port_ = 0;
};

}  // namespace strata::server

#endif  // STRATA_SERVER_STRATA_SERVER_H_
