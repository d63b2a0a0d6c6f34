// Per-token latency through the streaming gRPC API vs calling the engine in-process, for
// the same requests on the same server (cache off, so both do identical work).
//
//   build/tests/bench/grpc_overhead_bench [--quick]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "server/strata_server.h"
#include "strata/v1/chat.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double ttft_ms;
  double per_token_ms;  // mean gap between tokens after the first
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Timing ViaEngine(strata::engine::Engine& e, const std::vector<int32_t>& prompt, int n) {
  strata::engine::TurnRequest r;
  r.key = {"bench", "inproc"};
  r.prompt = prompt;
  r.max_new_tokens = n;
  auto t0 = Clock::now();
  auto stream = *e.Submit(std::move(r));
  strata::engine::TurnStream::Event ev;
  Clock::time_point first{}, last{};
  int tokens = 0;
  while (stream->Next(&ev, absl::Seconds(60))) {
    if (!ev.token_ids.empty()) {
      last = Clock::now();
      if (tokens == 0) first = last;
      tokens += static_cast<int>(ev.token_ids.size());
    }
  }
  return {Ms(first - t0), tokens > 1 ? Ms(last - first) / (tokens - 1) : 0};
}

Timing ViaGrpc(strata::v1::ChatService::Stub& stub, const std::vector<int32_t>& prompt, int n) {
  strata::v1::ChatRequest req;
  req.set_session_id("grpc");
  req.set_max_new_tokens(static_cast<uint32_t>(n));
  req.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  grpc::ClientContext ctx;
  auto t0 = Clock::now();
  auto reader = stub.Chat(&ctx, req);
  strata::v1::ChatEvent ev;
  Clock::time_point first{}, last{};
  int tokens = 0;
  while (reader->Read(&ev)) {
    if (ev.has_delta()) {
      last = Clock::now();
      if (tokens == 0) first = last;
      tokens += ev.delta().token_ids_size();
    }
  }
  reader->Finish();
  return {Ms(first - t0), tokens > 1 ? Ms(last - first) / (tokens - 1) : 0};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  strata::server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.metrics_address = "";
  o.cache_enabled = false;
  auto server = strata::server::StrataServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = strata::v1::ChatService::NewStub(channel);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 64; ++i) prompt.push_back(32 + (i * 13) % 95);
  const int n = quick ? 8 : 128;
  const int reps = quick ? 1 : 7;
  ViaGrpc(*stub, prompt, 4);  // warm the channel
  std::vector<double> e_ttft, e_tok, g_ttft, g_tok;
  for (int rep = 0; rep < reps; ++rep) {
    Timing e = ViaEngine((*server)->engine(), prompt, n);
    Timing g = ViaGrpc(*stub, prompt, n);
    e_ttft.push_back(e.ttft_ms);
    e_tok.push_back(e.per_token_ms);
    g_ttft.push_back(g.ttft_ms);
    g_tok.push_back(g.per_token_ms);
  }
  std::printf("gRPC streaming vs in-process engine, built-in model, 64-token prompt, %d new tokens, median of %d\n",
              n, reps);
  std::printf("%-12s %12s %12s %8s\n", "", "in-process", "gRPC", "ratio");
  std::printf("%-12s %12.3f %12.3f %8.3f\n", "ttft_ms", Median(e_ttft), Median(g_ttft),
              Median(g_ttft) / Median(e_ttft));
  std::printf("%-12s %12.3f %12.3f %8.3f\n", "ms/token", Median(e_tok), Median(g_tok),
              Median(g_tok) / Median(e_tok));
  return 0;
}
