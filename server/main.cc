// strata: hierarchical KV-cache store with a co-located LLM inference engine.
//
//   strata serve [flags]   serve the gRPC API (and /metrics) on the built-in model
//   strata chat  [flags]   run a scripted multi-turn chat against a running server
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "model/logits_dump.h"
#include "server/bench/bench_command.h"
#include "server/chat_client.h"
#include "server/strata_server.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "serve: address to listen on");
ABSL_FLAG(int, port, 7070, "serve: gRPC port (0: pick a free one); chat: port to call");
ABSL_FLAG(int, metrics_port, 9464, "serve: Prometheus /metrics port (0: pick a free one, -1: off)");
ABSL_FLAG(std::string, cache, "on", "serve: session KV cache, on or off");
ABSL_FLAG(int64_t, host_cache_bytes, int64_t{1} << 30, "serve: capacity of the host-memory tier");
ABSL_FLAG(bool, pin_host_memory, true,
          "serve: lock the host tier in memory (needs CAP_IPC_LOCK or a memlock limit as large)");
ABSL_FLAG(int, chunk_tokens, 256, "serve: tokens per KV chunk");
ABSL_FLAG(std::string, ssd_dirs, "",
          "serve: comma-separated directories for the SSD tier (one preallocated file each); empty: off");
ABSL_FLAG(int64_t, ssd_capacity_bytes, int64_t{16} << 30, "serve: SSD tier capacity per directory");
ABSL_FLAG(std::string, index_dir, "", "serve: RocksDB session index (default: <first ssd dir>/index)");
ABSL_FLAG(int64_t, ttl_seconds, 86400, "serve: sessions unused this long are dropped from every tier");
ABSL_FLAG(std::string, placement, "scheduler-aware",
          "serve: placement policy: scheduler-aware (prefetch from the queue, never evict it), lru, fifo");
ABSL_FLAG(bool, fetch_or_recompute, true,
          "serve: recompute a prefix held only on SSD when that is measured to be faster than loading it");
ABSL_FLAG(int, max_batch, 64, "serve: most turns in one decode batch");
ABSL_FLAG(int, max_step_tokens, 512, "serve: most tokens in one forward step");
ABSL_FLAG(int, max_new_tokens_limit, 4096, "serve: largest max_new_tokens a request may ask for");
ABSL_FLAG(std::string, api_keys, "",
          "serve: comma-separated key=tenant pairs; empty: no auth, one tenant 'default'");
ABSL_FLAG(std::string, port_file, "", "serve: write 'grpc_port metrics_port' here once listening");
ABSL_FLAG(std::string, target, "", "chat: server address (default 127.0.0.1:--port)");
ABSL_FLAG(std::string, session, "demo", "chat: session ID");
ABSL_FLAG(std::string, api_key, "", "chat: API key to send");
ABSL_FLAG(int, max_new_tokens, 48, "chat: tokens to generate per turn");
ABSL_FLAG(std::string, model, "",
          "serve, logits: Hugging Face model directory (config.json + *.safetensors; Llama, Mistral, Qwen2); "
          "serve: empty for the built-in model");
ABSL_FLAG(std::string, device, "auto",
          "serve, logits: cuda, cpu, or auto (cuda when strata was built with CUDA and a GPU is visible)");
ABSL_FLAG(double, kv_memory_fraction, 0.85,
          "serve: share of the GPU memory left after the weights that the paged KV pool takes");
ABSL_FLAG(std::string, tokens, "", "logits: token sequences, comma-separated ids, sequences separated by ';'");

namespace {

strata::server::StrataServer* g_server = nullptr;

int Serve() {
  strata::server::ServerOptions o;
  const std::string host = absl::GetFlag(FLAGS_host);
  o.listen_address = host + ":" + std::to_string(absl::GetFlag(FLAGS_port));
  int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.metrics_address = metrics_port < 0 ? "" : host + ":" + std::to_string(metrics_port);
  const std::string cache = absl::GetFlag(FLAGS_cache);
  if (cache != "on" && cache != "off") {
    std::fprintf(stderr, "--cache must be on or off, got '%s'\n", cache.c_str());
    return 2;
  }
  o.cache_enabled = cache == "on";
  o.host_cache_bytes = absl::GetFlag(FLAGS_host_cache_bytes);
  o.pin_host_memory = absl::GetFlag(FLAGS_pin_host_memory);
  o.chunk_tokens = absl::GetFlag(FLAGS_chunk_tokens);
  for (absl::string_view dir : absl::StrSplit(absl::GetFlag(FLAGS_ssd_dirs), ',', absl::SkipEmpty())) {
    o.ssd_dirs.emplace_back(dir);
  }
  o.ssd_capacity_bytes_per_dir = absl::GetFlag(FLAGS_ssd_capacity_bytes);
  o.index_dir = absl::GetFlag(FLAGS_index_dir);
  o.ttl = absl::Seconds(absl::GetFlag(FLAGS_ttl_seconds));
  auto placement = strata::storage::ParsePlacementPolicy(absl::GetFlag(FLAGS_placement));
  if (!placement.ok() || *placement == strata::storage::PlacementPolicy::kBelady) {
    std::fprintf(stderr, "--placement: %s\n",
                 placement.ok() ? "belady needs the future; it runs only in the simulator"
                                : std::string(placement.status().message()).c_str());
    return 2;
  }
  o.placement = *placement;
  o.engine.fetch_or_recompute = absl::GetFlag(FLAGS_fetch_or_recompute);
  o.model_dir = absl::GetFlag(FLAGS_model);
  o.backend.device = absl::GetFlag(FLAGS_device);
  o.backend.kv_memory_fraction = absl::GetFlag(FLAGS_kv_memory_fraction);
  o.engine.max_running = absl::GetFlag(FLAGS_max_batch);
  o.engine.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  o.engine.max_new_tokens_limit = absl::GetFlag(FLAGS_max_new_tokens_limit);
  for (absl::string_view pair : absl::StrSplit(absl::GetFlag(FLAGS_api_keys), ',', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
      std::fprintf(stderr, "--api_keys wants key=tenant pairs, got '%s'\n", std::string(pair).c_str());
      return 2;
    }
    o.api_keys[kv[0]] = kv[1];
  }
  auto server = strata::server::StrataServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "strata serve: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    std::string tmp = path + ".tmp";
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(f, "%d %d\n", (*server)->port(), (*server)->metrics_port());
      std::fclose(f);
      std::rename(tmp.c_str(), path.c_str());
    }
  }
  g_server = server->get();
  // SIGINT/SIGTERM: shut down from a thread that is allowed to block.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  std::thread([signals]() mutable {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    g_server->Shutdown();
  }).detach();
  (*server)->Wait();
  return 0;
}

int Chat() {
  strata::server::ChatScriptOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  if (o.target.empty()) o.target = "127.0.0.1:" + std::to_string(absl::GetFlag(FLAGS_port));
  o.session_id = absl::GetFlag(FLAGS_session);
  o.api_key = absl::GetFlag(FLAGS_api_key);
  o.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  o.user_turns = {
      "Hello! I am planning a week of hiking in the Alps in September. What should I pack?",
      "Good. Which huts would you book near Zermatt, and how early?",
      "Thanks. Summarise the whole plan in three short bullet points.",
  };
  return strata::server::RunChatScript(o);
}

// Prints the model's logits for --tokens as JSON (tests/gpu/check_hf_logits.py compares
// them with HF transformers).
int Logits() {
  auto weights = strata::model::ModelWeights::LoadDirectory(absl::GetFlag(FLAGS_model));
  if (!weights.ok()) {
    std::fprintf(stderr, "%s\n", std::string(weights.status().message()).c_str());
    return 1;
  }
  std::vector<std::vector<int32_t>> sequences;
  for (absl::string_view seq : absl::StrSplit(absl::GetFlag(FLAGS_tokens), ';', absl::SkipEmpty())) {
    std::vector<int32_t> ids;
    for (absl::string_view id : absl::StrSplit(seq, ',', absl::SkipEmpty())) {
      int32_t t = 0;
      if (!absl::SimpleAtoi(id, &t)) {
        std::fprintf(stderr, "--tokens: '%s' is not a token id\n", std::string(id).c_str());
        return 2;
      }
      ids.push_back(t);
    }
    sequences.push_back(std::move(ids));
  }
  strata::model::BackendOptions backend;
  backend.device = absl::GetFlag(FLAGS_device);
  auto model = strata::model::CreateBackend(*std::move(weights), backend);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  auto json = strata::model::DumpLogits(**model, sequences);
  if (!json.ok()) {
    std::fprintf(stderr, "%s\n", std::string(json.status().message()).c_str());
    return 2;
  }
  std::printf("%s\n", json->c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Block the shutdown signals in every thread; the serve loop waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::SetProgramUsageMessage("strata serve|chat|logits [flags]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() > 1 ? args[1] : "";
  if (command == "serve") return Serve();
  if (command == "chat") return Chat();
  if (command == "logits") return Logits();
  if (command == "bench") return strata::server::bench::RunBenchCommand();
  std::fprintf(stderr, "usage: strata serve|chat|logits [flags]   (--help for flags)\n");
  return 2;
}
