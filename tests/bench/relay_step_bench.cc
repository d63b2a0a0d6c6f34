// relay_step_bench: relay attention's forms inside whole decode steps of the CUDA backend,
// where relay_attention_bench times the attention alone (L2 flushed, eager launches). A
// random-weight model of Llama-3-8B shapes runs `rows` sequences on one shared prefix of
// `prefix` tokens, each with `own` tokens after it, and times decode steps (CUDA graphs, as
// the server runs them, and eager) in each form, one model per form:
//   - relay, the model's default: chained (below) where the decode runs on the tensor cores
//     on Hopper (the H200), else the fused grid;
//   - relay, never chained: the system and context parts in one grid (the three launches
//     where the decode runs on the tensor cores);
//   - relay, system part beside the decode on the model's second stream;
//   - relay, chained: the system part (wgmma form) then the decode as its programmatic
//     dependent, on the step's stream (Hopper; ordinary launches elsewhere);
//   - shared pages, no relay: each sequence reads the prefix's pages itself.
// The step's floor beside them: every weight and the KV the step must read (the prefix once
// plus every sequence's own tokens) at the copy rate measured in the same run (cuda_bench.h's
// CopyCeiling, L2 flushed).
//
//   relay_step_bench [--shape=ROWS,PREFIX,OWN] (default 64,4096,1024) [--steps=N] [--chunk=N]
//                    [--long=N] [--exponential] [--tensor_decode] [--merge_part_by_part]
//                    [--chained_part_keys=N]
// --chunk=N: every step also prefills N tokens of a new sequence on the prefix (mixed steps;
// the server's default step budget is 512 tokens, so 64 decodes leave 448).
// --long=N: one more sequence decodes in every step, not on the prefix, of N tokens (a batch's
// longest row: the server's sessions have own tokens of many lengths), and
// the relay forms run again with the decode split for the longest row alone (the model's
// split_uneven_rows off: how they ran before it).
// --exponential: each row's own tokens drawn from an exponential distribution of mean OWN
// (seeded; at least 1, at most 8 x OWN), as strata bench draws a turn's new tokens, with the
// relay forms again split for the longest row.
// --merge_part_by_part: the merges load their parts a group of 4 at a time, as before the
// loads at once (merge_launch.h), for the comparison.
// --chained_part_keys=N: the chained form's shortest part of the prompt (default
// kRelayChainedMinPartKeys; 256 splits it as before the rule, over all the SMs).
// --tensor_decode: the forms again with every decode (relay's context part included) on the
// tensor cores (CudaModelOptions::decode_kernel; relay then runs as three launches).
// Without a GPU it says so and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/merge_launch.h"
#include "kernels/attention/relay.h"
#include "model/cuda/cuda_model.h"
#include "tests/bench/cuda_bench.h"

namespace strata::model {
namespace {

struct Form {
  const char* name;
  bool relay;
  int64_t beside_min_tokens;   // CudaModelOptions::relay_beside_min_tokens
  int64_t chained_min_tokens;  // CudaModelOptions::relay_chained_min_tokens
  bool split_uneven = true;    // CudaModelOptions::split_uneven_rows
  kernels::DecodeKernel kernel = kernels::DecodeKernel::kAuto;  // CudaModelOptions::decode_kernel
};

// The median decode step (seconds) of `rows` sequences on one prefix in `form`; -1 on failure.
// weight_bytes: the weights a step reads (the embedding table only for its rows, unless it is
// also the LM head), set from the model. With `chunk` > 0 every step also prefills `chunk`
// tokens of a new sequence on the prefix (a mixed step, as the server's while sessions
// arrive: eager, graphs or not).
double TimeForm(double* weight_bytes, const ModelConfig& c, const Form& form, bool graphs, int rows, int prefix,
                const std::vector<int>& owns, int steps, int chunk, int long_tokens) {
  CudaModelOptions o;
  o.cuda_graphs = graphs;
  o.kv_memory_fraction = 0.9;
  o.share_prefixes = true;
  o.relay_attention = form.relay;
  o.relay_min_saved_tokens = 0;
  o.relay_beside_min_tokens = form.beside_min_tokens;
  o.relay_chained_min_tokens = form.chained_min_tokens;
  o.split_uneven_rows = form.split_uneven;
  o.decode_kernel = form.kernel;
  auto made = CudaModel::CreateRandom(c, 1234, o);
  if (!made.ok()) {
    std::printf("%s: %s\n", form.name, std::string(made.status().message()).c_str());
    return -1;
  }
  CudaModel& m = **made;
  const double embed_bytes = 2.0 * c.vocab_size * c.hidden_size;
  *weight_bytes = static_cast<double>(m.weight_bytes()) - (c.tie_embeddings ? 0.0 : embed_bytes);
  auto fail = [&](const absl::Status& s) {
    std::printf("%s: %s\n", form.name, std::string(s.message()).c_str());
    return -1.0;
  };
  std::vector<int32_t> system(static_cast<size_t>(prefix));
  for (int i = 0; i < prefix; ++i) system[i] = (i * 7919 + 13) % c.vocab_size;
  auto p = m.NewSequence(prefix);
  if (!p.ok()) return fail(p.status());
  std::shared_ptr<SequenceState> shared(std::move(*p));
  ForwardEntry pe{shared.get(), 0, system};
  if (absl::Status s = m.Forward({&pe, 1}); !s.ok()) return fail(s);
  std::vector<std::unique_ptr<SequenceState>> seqs;
  const int longest_own = *std::max_element(owns.begin(), owns.end());
  std::vector<int32_t> tokens(static_cast<size_t>(longest_own));
  for (int r = 0; r < rows; ++r) {
    const int own = owns[static_cast<size_t>(r)];
    auto sq = m.NewSequenceOnPrefix(shared, prefix, own + steps + 4);
    if (!sq.ok()) return fail(sq.status());
    seqs.push_back(std::move(*sq));
    for (int i = 0; i < own; ++i) tokens[i] = (i * 31 + r * 977) % c.vocab_size;
    ForwardEntry e{seqs.back().get(), prefix, absl::Span<const int32_t>(tokens).subspan(0, static_cast<size_t>(own))};
    if (absl::Status s = m.Forward({&e, 1}); !s.ok()) return fail(s);
  }
  std::unique_ptr<SequenceState> lone;  // --long: its own copy of every token
  if (long_tokens > 0) {
    auto sq = m.NewSequence(long_tokens + steps + 4);
    if (!sq.ok()) return fail(sq.status());
    lone = std::move(*sq);
    std::vector<int32_t> all(static_cast<size_t>(long_tokens));
    for (int i = 0; i < long_tokens; ++i) all[i] = (i * 53 + 11) % c.vocab_size;
    for (int at = 0; at < long_tokens; at += 2048) {  // in chunks, as the server's budget does
      const int n = std::min(2048, long_tokens - at);
      ForwardEntry e{lone.get(), at, absl::Span<const int32_t>(all).subspan(at, n)};
      if (absl::Status s = m.Forward({&e, 1}); !s.ok()) return fail(s);
    }
  }
  std::vector<int32_t> step_tokens(static_cast<size_t>(rows) + 1), next(static_cast<size_t>(rows) + 1);
  std::vector<int32_t> chunk_tokens(static_cast<size_t>(chunk));
  for (int i = 0; i < chunk; ++i) chunk_tokens[i] = (i * 17 + 5) % c.vocab_size;
  std::vector<double> times;
  for (int s = 0; s < steps + 3; ++s) {
    std::vector<ForwardEntry> batch;
    for (int r = 0; r < rows; ++r) {
      step_tokens[r] = (s * 131 + r * 7) % c.vocab_size;
      batch.push_back(ForwardEntry{seqs[r].get(), prefix + owns[static_cast<size_t>(r)] + s,
                                   absl::Span<const int32_t>(&step_tokens[r], 1),
                                   nullptr, &next[r]});
    }
    if (lone != nullptr) {
      step_tokens[rows] = (s * 17 + 3) % c.vocab_size;
      batch.push_back(ForwardEntry{lone.get(), long_tokens + s, absl::Span<const int32_t>(&step_tokens[rows], 1),
                                   nullptr, &next[rows]});
    }
    std::unique_ptr<SequenceState> arriving;
    if (chunk > 0) {
      auto sq = m.NewSequenceOnPrefix(shared, prefix, chunk);
      if (!sq.ok()) return fail(sq.status());
      arriving = std::move(*sq);
      batch.push_back(ForwardEntry{arriving.get(), prefix, chunk_tokens});
    }
    const double t0 = bench::NowSeconds();
    if (absl::Status st = m.Forward(batch); !st.ok()) return fail(st);
    if (s >= 3) times.push_back(bench::NowSeconds() - t0);  // past the graph captures
  }
  return bench::Median(times);
}

}  // namespace
}  // namespace strata::model

int main(int argc, char** argv) {
  using namespace strata::model;
  int rows = 64, prefix = 4096, own = 1024, steps = 20, chunk = 0, long_tokens = 0;
  bool exponential = false, tensor_decode = false;
  for (int i = 1; i < argc; ++i) {
    if (std::sscanf(argv[i], "--shape=%d,%d,%d", &rows, &prefix, &own) == 3) continue;
    if (std::sscanf(argv[i], "--steps=%d", &steps) == 1) continue;
    if (std::sscanf(argv[i], "--chunk=%d", &chunk) == 1) continue;
    if (std::sscanf(argv[i], "--long=%d", &long_tokens) == 1) continue;
    if (int keys = 0; std::sscanf(argv[i], "--chained_part_keys=%d", &keys) == 1) {
      strata::kernels::internal::SetRelayChainedMinPartKeysForBenchmarks(keys);
      continue;
    }
    if (std::strcmp(argv[i], "--merge_part_by_part") == 0) {
      strata::kernels::internal::SetMergeLoadsAtOnceForBenchmarks(false);
      continue;
    }
    if (std::strcmp(argv[i], "--exponential") == 0) {
      exponential = true;
      continue;
    }
    if (std::strcmp(argv[i], "--tensor_decode") == 0) {
      tensor_decode = true;
      continue;
    }
    std::fprintf(stderr, "usage: relay_step_bench [--shape=ROWS,PREFIX,OWN] [--steps=N] [--chunk=N] [--long=N] [--exponential] "
                 "[--tensor_decode] [--merge_part_by_part] [--chained_part_keys=N]\n");
    return 2;
  }
  if (CudaModel::DeviceCount() == 0) {
    std::printf("relay_step_bench: no CUDA device, nothing measured\n");
    return 0;
  }
  auto named = ModelConfig::Named("llama3-8b");
  if (!named.ok()) return 1;
  ModelConfig c = *named;
  // Each row's own tokens: OWN, or drawn exponentially (mean OWN) with --exponential.
  std::vector<int> owns(static_cast<size_t>(rows), own);
  if (exponential) {
    std::mt19937_64 rng(20261128);
    std::exponential_distribution<double> draw(1.0 / own);
    for (int& n : owns) n = std::clamp(static_cast<int>(draw(rng) + 0.5), 1, 8 * own);
  }
  const int longest_own = *std::max_element(owns.begin(), owns.end());
  const double own_tokens = std::accumulate(owns.begin(), owns.end(), 0.0);
  c.max_context = std::max(prefix + longest_own, long_tokens) + steps + 256;
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreate(&stream));
  const double copy_bw = strata::bench::CopyCeiling(stream).Gbps() * 1e9;  // read + written, bytes/s
  CHECK_CUDA(cudaStreamDestroy(stream));
  const double kv_token_bytes = 2.0 * c.num_layers * c.kv_dim() * 2;
  // The step's floor: the weights, the prefix's KV once, every sequence's own KV, at the copy rate.
  auto floor_s = [&](double weight_bytes) {
    return (weight_bytes + kv_token_bytes * (prefix + own_tokens + long_tokens)) / copy_bw;
  };
  std::printf("relay_step_bench: llama3-8b shapes, %d rows on one %d-token prefix, %d own tokens each; copy %.0f "
              "GB/s\n",
              rows, prefix, own, copy_bw / 1e9);
  if (long_tokens > 0) {
    std::printf("and one more row of %d tokens of its own, not on the prefix (in the floor too)\n", long_tokens);
  }
  if (exponential) {
    std::printf("own tokens drawn exponentially: mean %.0f, longest %d\n", own_tokens / rows, longest_own);
  }
  if (chunk > 0) {
    std::printf("mixed steps: each also prefills %d tokens of a new sequence on the prefix (eager in both columns; "
                "the floor counts the decodes only)\n",
                chunk);
  }
  std::printf("\n");
  std::printf(
      "| form | graphs: step ms | vs the first | floor / step | eager: step ms | vs the first |\n|---|---|---|---|---|---|\n");
  constexpr int64_t kNever = strata::kernels::kRelayChainedNever;
  constexpr int64_t kAuto = strata::kernels::kRelayChainedOnTensorCores;
  std::vector<Form> forms = {{"relay, the default (chained where the decode is on tensor cores)", true, -1, kAuto},
                             {"relay, fused / three launches, never chained", true, -1, kNever},
                             {"relay, system part beside the decode", true, 0, kNever},
                             {"relay, chained (system part on wgmma, decode its dependent)", true, -1, 0},
                             {"shared pages, no relay", false, -1, kAuto}};
  if (long_tokens > 0 || exponential) {
    forms.push_back({"relay, the default, split for the longest row", true, -1, kAuto, false});
    forms.push_back({"relay, chained, split for the longest row", true, -1, 0, false});
    forms.push_back({"shared pages, split for the longest row", false, -1, kAuto, false});
  }
  if (tensor_decode) {
    constexpr strata::kernels::DecodeKernel kTc = strata::kernels::DecodeKernel::kTensorCores;
    forms.push_back({"relay, three launches, decode on tensor cores", true, -1, kNever, true, kTc});
    forms.push_back({"relay, chained, decode on tensor cores", true, -1, 0, true, kTc});
    forms.push_back({"shared pages, decode on tensor cores", false, -1, kAuto, true, kTc});
  }
  double first[2] = {0, 0}, weight_bytes = 0;  // the first form's steps, what the others are against
  for (const Form& f : forms) {
    double t[2];
    for (int graphs = 1; graphs >= 0; --graphs) {
      t[graphs] = TimeForm(&weight_bytes, c, f, graphs == 1, rows, prefix, owns, steps, chunk, long_tokens);
      if (t[graphs] < 0) return 1;
      if (&f == &forms[0]) first[graphs] = t[graphs];
    }
    std::printf("| %s | %.3f | %.3f | %.2f | %.3f | %.3f |\n", f.name, t[1] * 1e3, t[1] / first[1],
                floor_s(weight_bytes) / t[1], t[0] * 1e3, t[0] / first[0]);
    std::fflush(stdout);
  }
  return 0;
}
