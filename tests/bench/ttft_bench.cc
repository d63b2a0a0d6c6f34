// TTFT of a turn whose history is in the session cache vs the same turn recomputed, on
// the built-in model (CPU backend), for histories of 256..4K tokens.
//
//   build/tests/bench/ttft_bench [--quick]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "model/cpu/cpu_model.h"
#include "engine/engine.h"

namespace strata {
namespace {

using engine::Engine;

double RunTurn(Engine& e, const std::string& session, const std::vector<int32_t>& prompt,
               engine::TurnResult* result) {
  engine::TurnRequest r;
  r.key = {"bench", session};
  r.prompt = prompt;
  r.max_new_tokens = 1;
  auto stream = e.Submit(std::move(r));
  if (!stream.ok()) {
    std::fprintf(stderr, "submit: %s\n", stream.status().ToString().c_str());
    std::exit(1);
  }
  engine::TurnStream::Event ev;
  while ((*stream)->Next(&ev, absl::Seconds(600))) {
    if (ev.done) *result = *ev.done;
  }
  return result->ttft_ms;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  text::ByteTokenizer tokenizer;
  model::ModelConfig config = model::ModelConfig::Builtin();
  auto model = std::make_unique<model::CpuModel>(
      model::ModelWeights::Random(config, 20241122, tokenizer.SilentTokens()));
  storage::SessionStoreOptions so;
  so.layout = Engine::ChunkLayoutFor(config, 256);
  so.host_capacity_bytes = int64_t{2} << 30;
  so.model_fingerprint = model->weights().fingerprint();
  auto store = *storage::SessionStore::Create(so);
  auto eng = *Engine::Create({}, std::move(model), &tokenizer, store.get(), nullptr);

  const std::vector<int> histories = quick ? std::vector<int>{256} : std::vector<int>{256, 512, 1024, 2048, 4096};
  const int new_tokens = 32;
  const int reps = quick ? 1 : 3;
  std::printf("TTFT, built-in model (%d layers, hidden %d), CPU backend, %d new tokens per turn\n",
              config.num_layers, config.hidden_size, new_tokens);
  std::printf("%8s %8s %14s %16s %9s\n", "history", "reused", "cached_ms", "recomputed_ms", "speedup");
  for (int h : histories) {
    std::vector<int32_t> history(static_cast<size_t>(h));
    for (int i = 0; i < h; ++i) history[i] = 32 + (i * 7919) % 95;
    std::vector<int32_t> turn = history;
    for (int i = 0; i < new_tokens; ++i) turn.push_back(32 + (i * 31) % 95);
    std::vector<double> cached, recomputed;
    int64_t reused = 0;
    for (int rep = 0; rep < reps; ++rep) {
      const std::string session = "h" + std::to_string(h) + "-" + std::to_string(rep);
      engine::TurnResult r;
      RunTurn(*eng, session, history, &r);  // turn N-1 leaves the history in the cache
      cached.push_back(RunTurn(*eng, session, turn, &r));
      reused = r.usage.cached_tokens;
      recomputed.push_back(RunTurn(*eng, session + "-fresh", turn, &r));  // no history: full prefill
      if (r.usage.cached_tokens != 0) std::fprintf(stderr, "recompute run hit the cache\n");
    }
    const double c = Median(cached), f = Median(recomputed);
    std::printf("%8d %8lld %14.1f %16.1f %8.1fx\n", h, static_cast<long long>(reused), c, f, f / c);
  }
  return 0;
}
