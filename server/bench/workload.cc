#include "server/bench/workload.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"

namespace strata::server::bench {
namespace {

// SplitMix64: a small generator whose sequence is the same on every platform, so a seed
// gives the same token IDs everywhere (<random>'s distributions do not promise that).
class TokenSource {
 public:
  TokenSource(uint64_t seed, uint64_t stream) : state_(seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xBF58476D1CE4E5B9ull) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::vector<int32_t> Tokens(int64_t count) {
    std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
    for (int32_t& t : out) t = 1 + static_cast<int32_t>(Next() % 255);
    return out;
  }

 private:
  uint64_t state_;
};

// Streams of TokenSource, so that system prompts, sessions and sweeps never share one.
constexpr uint64_t kSystemPromptStream = 1ull << 62;

int32_t CapAnswer(int64_t tokens, int32_t limit) {
  return static_cast<int32_t>(std::clamp<int64_t>(tokens, 1, limit));
}

}  // namespace

int64_t Workload::TotalTurns() const {
  int64_t n = 0;
  for (const WorkloadSession& s : sessions) n += static_cast<int64_t>(s.turns.size());
  return n;
}

absl::Status SyntheticWorkloadOptions::Validate() const {
  if (sessions < 1) return absl::InvalidArgumentError("sessions must be >= 1");
  if (system_prompts < 0) return absl::InvalidArgumentError("system_prompts must be >= 0");
  if (system_prompts > 0 && (system_prompt_tokens < 1 || system_prompt_tokens >= max_context_tokens)) {
    return absl::InvalidArgumentError("system_prompt_tokens must be >= 1 and < max_context_tokens");
  }
  if (max_new_tokens_limit < 1) return absl::InvalidArgumentError("max_new_tokens_limit must be >= 1");
  storage::SyntheticTraceOptions t;
  t.sessions = sessions;
  t.mean_turns = mean_turns;
  t.session_rate_per_s = session_rate_per_s;
  t.mean_prompt_tokens = mean_prompt_tokens;
  t.mean_output_tokens = mean_output_tokens;
  t.mean_think_s = mean_think_s;
  t.max_context_tokens = max_context_tokens;
  return t.Validate();
}

absl::StatusOr<Workload> MakeSyntheticWorkload(const SyntheticWorkloadOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const int64_t system_tokens = options.system_prompts > 0 ? options.system_prompt_tokens : 0;
  storage::SyntheticTraceOptions t;
  t.sessions = options.sessions;
  t.mean_turns = options.mean_turns;
  t.session_rate_per_s = options.session_rate_per_s;
  t.mean_prompt_tokens = options.mean_prompt_tokens;
  t.mean_output_tokens = options.mean_output_tokens;
  t.mean_think_s = options.mean_think_s;
  t.max_context_tokens = options.max_context_tokens - system_tokens;
  t.seed = options.seed;
  TraceWorkloadOptions replay;
  replay.max_new_tokens_limit = options.max_new_tokens_limit;
  replay.seed = options.seed;
  absl::StatusOr<Workload> w = MakeTraceWorkload(storage::SyntheticTrace(t), replay);
  if (!w.ok()) return w.status();
  w->name = "synthetic";
  if (options.system_prompts > 0) {
    for (int k = 0; k < options.system_prompts; ++k) {
      w->system_prompts.push_back(
          TokenSource(options.seed, kSystemPromptStream + static_cast<uint64_t>(k)).Tokens(system_tokens));
    }
    TokenSource pick(options.seed, kSystemPromptStream - 1);
    for (WorkloadSession& s : w->sessions) {
      s.system_prompt = static_cast<int>(pick.Next() % static_cast<uint64_t>(options.system_prompts));
    }
  }
  return w;
}

absl::StatusOr<Workload> MakeTraceWorkload(const storage::Trace& trace, const TraceWorkloadOptions& options) {
  if (!std::isfinite(options.time_scale) || options.time_scale < 0) {
    return absl::InvalidArgumentError("time_scale must be finite and >= 0");
  }
  if (options.max_new_tokens_limit < 1) return absl::InvalidArgumentError("max_new_tokens_limit must be >= 1");
  Workload w;
  w.name = "trace";
  std::map<std::string, size_t> index;  // session_id -> position in w.sessions
  for (const storage::TraceRequest& r : trace.requests) {
    auto [it, inserted] = index.emplace(r.session_id, w.sessions.size());
    if (inserted) w.sessions.push_back(WorkloadSession{.session_id = r.session_id});
    WorkloadSession& s = w.sessions[it->second];
    TokenSource source(options.seed, it->second * 4096 + s.turns.size());
    int64_t fresh = std::max<int64_t>(r.context_tokens - r.reusable_tokens, s.turns.empty() ? 1 : 0);
    s.turns.push_back(WorkloadTurn{.arrival_ms = r.arrival_ms * options.time_scale,
                                   .new_tokens = source.Tokens(fresh),
                                   .max_new_tokens = CapAnswer(r.output_tokens, options.max_new_tokens_limit)});
  }
  return w;
}

absl::Status SweepShape::Validate() const {
  if (history_tokens < 1) return absl::InvalidArgumentError("history must be >= 1");
  if (new_tokens < 1) return absl::InvalidArgumentError("new_tokens must be >= 1");
  if (concurrency < 1) return absl::InvalidArgumentError("concurrency must be >= 1");
  if (answer_tokens < 1) return absl::InvalidArgumentError("sweep_answer_tokens must be >= 1");
  if (output_tokens < 1) return absl::InvalidArgumentError("sweep_output_tokens must be >= 1");
  if (!(gap_ms >= 0)) return absl::InvalidArgumentError("sweep_gap_ms must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<Workload> MakeSweepWorkload(const SweepShape& shape) {
  if (absl::Status s = shape.Validate(); !s.ok()) return s;
  Workload w;
  w.name = "sweep";
  w.turn_barrier = true;
  w.round_gap_ms = shape.gap_ms;
  for (int i = 0; i < shape.concurrency; ++i) {
    TokenSource source(shape.seed, static_cast<uint64_t>(i));
    WorkloadSession s;
    s.session_id = absl::StrCat("h", shape.history_tokens, "-n", shape.new_tokens, "-c", shape.concurrency, "-", i);
    s.turns.push_back(WorkloadTurn{.arrival_ms = 0,
                                   .new_tokens = source.Tokens(shape.history_tokens),
                                   .max_new_tokens = shape.answer_tokens,
                                   .measured = false});
    s.turns.push_back(WorkloadTurn{.arrival_ms = 0,
                                   .new_tokens = source.Tokens(shape.new_tokens),
                                   .max_new_tokens = shape.output_tokens,
                                   .measured = true});
    w.sessions.push_back(std::move(s));
  }
  return w;
}

}  // namespace strata::server::bench
