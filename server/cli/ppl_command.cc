// `strata ppl`: teacher-forced perplexity and bits per byte of a text file
// under any model strata serves, on the CPU or the GPU (model/perplexity.h),
// for checking that a model, a backend or a change to either keeps the model's
// quality.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "model/perplexity.h"
#include "model/truncation_eval.h"
#include "server/cli/commands.h"
#include "server/cli/shared_flags.h"

ABSL_FLAG(std::string, text, "", "ppl: the text file to score (UTF-8)");
ABSL_FLAG(int, window, 1024, "ppl: the most tokens one prediction sees (sliding window)");
ABSL_FLAG(int, stride, 512, "ppl: tokens scored per window");
ABSL_FLAG(int, batch, 16, "ppl: windows scored side by side");
ABSL_FLAG(int, truncation_window, 0,
          "ppl: instead of sliding windows, stream the text through a sequence of this many tokens that is "
          "truncated when full (the newest --truncation_keep share kept), and compare keeping the stored KV "
          "re-rotated (strata), recomputing, and not re-rotating (model/truncation_eval.h)");
ABSL_FLAG(double, truncation_keep, 0.5, "ppl --truncation_window: share of the window kept at each truncation");
ABSL_FLAG(int, bos_token, -1,
          "ppl: token put before the text (-1: the tokenizer's BOS where it "
          "has one, as the built-in "
          "model's byte tokenizer does; -2: none)");

namespace strata::server::cli {
namespace {

// The three ways of truncating (model/truncation_eval.h) on the same text, as a table.
int CompareTruncations(const engine::ServedModel& served, const std::vector<int32_t>& tokens) {
  model::TruncationEvalOptions o;
  o.window = absl::GetFlag(FLAGS_truncation_window);
  o.keep = absl::GetFlag(FLAGS_truncation_keep);
  o.streams = absl::GetFlag(FLAGS_batch);
  struct Row {
    const char* name;
    model::TruncationMode mode;
    model::TruncationEvalResult r;
  };
  std::vector<Row> rows = {{"stored KV re-rotated (strata, AS)", model::TruncationMode::kStoredKv, {}},
                           {"recomputed (token truncation, TT)", model::TruncationMode::kRecompute, {}},
                           {"KV not re-rotated (NKVT)", model::TruncationMode::kNoReRotation, {}}};
  const absl::Time start = absl::Now();
  for (Row& row : rows) {
    auto r = model::StreamWithTruncation(*served.backend, tokens, row.mode, o);
    if (!r.ok()) {
      std::fprintf(stderr, "ppl: %s\n", std::string(r.status().message()).c_str());
      return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    row.r = *r;
  }
  std::printf("model        %s (%s backend)\n", served.description.c_str(), served.backend->name().c_str());
  std::printf("truncation   window %d, keep %.2f; %d streams, %lld truncations, %lld tokens scored; %.1f s\n", o.window,
              o.keep, o.streams, static_cast<long long>(rows[0].r.truncations),
              static_cast<long long>(rows[0].r.scored_tokens), absl::ToDoubleSeconds(absl::Now() - start));
  const double tt = std::exp(rows[1].r.nats_per_token());
  std::printf("%-36s %14s %14s\n", "kept history", "perplexity", "minus TT");
  for (const Row& row : rows) {
    const double ppl = std::exp(row.r.nats_per_token());
    std::printf("%-36s %14.4f %+14.4f\n", row.name, ppl, ppl - tt);
  }
  return 0;
}

}  // namespace

int PplCommand() {
  const std::string path = absl::GetFlag(FLAGS_text);
  if (path.empty()) {
    std::fprintf(stderr, "ppl: --text FILE is required\n");
    return 2;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "ppl: cannot read %s\n", path.c_str());
    return 2;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  auto served = engine::LoadServedModel(ServedModelFromFlags());
  if (!served.ok()) {
    std::fprintf(stderr, "%s\n", std::string(served.status().message()).c_str());
    return 1;
  }
  auto encoded = served->tokenizer->Encode(text);
  if (!encoded.ok()) {
    std::fprintf(stderr, "ppl: %s: %s\n", path.c_str(), std::string(encoded.status().message()).c_str());
    return 2;
  }
  std::vector<int32_t> tokens;
  int bos = absl::GetFlag(FLAGS_bos_token);
  if (bos == -1) bos = served->tokenizer->BosToken().value_or(-2);
  if (bos >= 0) tokens.push_back(bos);
  tokens.insert(tokens.end(), encoded->begin(), encoded->end());
  // Without a BOS the first token is context only: its bytes are not scored.
  const double scored_bytes = static_cast<double>(
      text.size() - (bos >= 0 || tokens.empty() ? 0 : served->tokenizer->TokenBytes(tokens[0]).size()));

  if (absl::GetFlag(FLAGS_truncation_window) > 0) return CompareTruncations(*served, tokens);

  model::PerplexityOptions o;
  o.window = absl::GetFlag(FLAGS_window);
  o.stride = absl::GetFlag(FLAGS_stride);
  o.batch = absl::GetFlag(FLAGS_batch);
  const absl::Time start = absl::Now();
  auto r = model::TeacherForcedNll(*served->backend, tokens, o);
  if (!r.ok()) {
    std::fprintf(stderr, "ppl: %s\n", std::string(r.status().message()).c_str());
    return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const double bits = r->nll_nats / std::log(2.0);
  std::printf("model        %s (%s backend)\n", served->description.c_str(), served->backend->name().c_str());
  std::printf("text         %s: %zu bytes, %lld tokens scored (window %d, stride %d)\n", path.c_str(), text.size(),
              static_cast<long long>(r->scored_tokens), o.window, o.stride);
  std::printf("perplexity   %.4f per token\n", std::exp(r->nats_per_token()));
  std::printf("bits/byte    %.4f\n", bits / scored_bytes);
  std::printf("nll          %.6f nats per token\n", r->nats_per_token());
  std::printf("time         %.2f s (%.0f tokens/s)\n", seconds, static_cast<double>(r->scored_tokens) / seconds);
  return 0;
}

}  // namespace strata::server::cli
