#include "server/bench/report.h"

#include <grpcpp/support/status.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/status_map.h"

namespace strata::server::bench {
namespace {

const char* TierName(int tier) {
  switch (tier) {
    case 1: return "hbm";
    case 2: return "host";
    case 3: return "ssd";
    default: return "none";
  }
}

std::string Ratio(double a, double b) {
  if (b == 0) return "-";
  return absl::StrFormat("%.3f", a / b);
}

void PrintLatencyRow(std::FILE* out, const char* name, const LatencyStats& s) {
  std::fprintf(out, "  %-22s %10.1f %10.1f %10.1f %10.1f %10.1f %8lld\n", name, s.p50, s.p90, s.p99, s.mean,
               s.max, static_cast<long long>(s.count));
}

std::string CountsByName(const std::map<std::string, int64_t>& m) {
  std::string out;
  for (const auto& [k, v] : m) absl::StrAppend(&out, out.empty() ? "" : ", ", k, " ", v);
  return out.empty() ? "none" : out;
}

// The figures a comparison shows, in order.
std::vector<std::pair<std::string, double>> KeyFigures(const RunSummary& s) {
  return {{"TTFT client p50 (ms)", s.ttft_client_ms.p50},
          {"TTFT client p90 (ms)", s.ttft_client_ms.p90},
          {"TTFT client p99 (ms)", s.ttft_client_ms.p99},
          {"TTFT server p50 (ms)", s.ttft_server_ms.p50},
          {"TTFT server p99 (ms)", s.ttft_server_ms.p99},
          {"inter-token p50 (ms)", s.inter_token_ms.p50},
          {"inter-token p99 (ms)", s.inter_token_ms.p99},
          {"end-to-end p50 (ms)", s.e2e_ms.p50},
          {"end-to-end p99 (ms)", s.e2e_ms.p99},
          {"requests/s", s.requests_per_s},
          {"output tokens/s", s.output_tokens_per_s},
          {"prefill computed", static_cast<double>(s.computed_tokens)},
          {"prefill reused", static_cast<double>(s.cached_tokens)},
          {"cache hits", static_cast<double>(s.Hits())},
          {"errors", static_cast<double>(s.turns_failed)}};
}

nlohmann::json StatsJson(const LatencyStats& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}};
}

}  // namespace

LatencyStats ComputeLatencyStats(std::vector<double> values) {
  LatencyStats s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  auto rank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
    return values[std::clamp<size_t>(k, 1, values.size()) - 1];
  };
  s.p50 = rank(50);
  s.p90 = rank(90);
  s.p99 = rank(99);
  s.max = values.back();
  return s;
}

int64_t RunSummary::Hits() const {
  int64_t n = 0;
  for (const auto& [tier, count] : hits_by_tier) n += count;
  return n;
}

RunSummary Summarize(std::string label, const RunResult& result, std::optional<ServerCounters> server) {
  RunSummary s;
  s.label = std::move(label);
  s.server = std::move(server);
  s.turns_not_sent = result.not_sent_turns;
  s.wall_s = result.wall_s;
  std::vector<double> ttft, server_ttft, itl, e2e;
  for (const TurnRecord& r : result.turns) {
    if (r.status_code != 0) {
      ++s.turns_failed;
      ++s.errors_by_code[GrpcCodeName(static_cast<grpc::StatusCode>(r.status_code))];
      continue;
    }
    ++s.turns_ok;
    s.prompt_tokens += r.prompt_tokens;
    s.cached_tokens += r.cached_tokens;
    s.computed_tokens += r.computed_tokens;
    s.completion_tokens += r.completion_tokens;
    if (r.tier != 0) ++s.hits_by_tier[TierName(r.tier)];
    if (!r.measured) continue;
    if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
    if (r.server_ttft_ms >= 0) server_ttft.push_back(r.server_ttft_ms);
    itl.insert(itl.end(), r.inter_token_ms.begin(), r.inter_token_ms.end());
    e2e.push_back(r.e2e_ms);
  }
  s.ttft_client_ms = ComputeLatencyStats(std::move(ttft));
  s.ttft_server_ms = ComputeLatencyStats(std::move(server_ttft));
  s.inter_token_ms = ComputeLatencyStats(std::move(itl));
  s.e2e_ms = ComputeLatencyStats(std::move(e2e));
  if (s.wall_s > 0) {
    s.requests_per_s = s.turns_ok / s.wall_s;
    s.output_tokens_per_s = s.completion_tokens / s.wall_s;
  }
  return s;
}

void PrintSummary(std::FILE* out, const RunSummary& s) {
  std::fprintf(out, "[%s]\n", s.label.c_str());
  std::fprintf(out, "  %-22s %10s %10s %10s %10s %10s %8s\n", "latency (ms)", "p50", "p90", "p99", "mean", "max",
               "n");
  PrintLatencyRow(out, "TTFT (client)", s.ttft_client_ms);
  PrintLatencyRow(out, "TTFT (server)", s.ttft_server_ms);
  PrintLatencyRow(out, "inter-token", s.inter_token_ms);
  PrintLatencyRow(out, "end-to-end", s.e2e_ms);
  std::fprintf(out, "  turns: %lld ok, %lld failed (%s), %lld not sent; %.2f s, %.2f requests/s, %.1f output tokens/s\n",
               static_cast<long long>(s.turns_ok), static_cast<long long>(s.turns_failed),
               CountsByName(s.errors_by_code).c_str(), static_cast<long long>(s.turns_not_sent), s.wall_s,
               s.requests_per_s, s.output_tokens_per_s);
  const double prefill = static_cast<double>(s.cached_tokens + s.computed_tokens);
  std::fprintf(out, "  prefill tokens (ChatDone): %lld computed, %lld reused (%.1f%% reused)\n",
               static_cast<long long>(s.computed_tokens), static_cast<long long>(s.cached_tokens),
               prefill > 0 ? 100.0 * s.cached_tokens / prefill : 0.0);
  std::fprintf(out, "  cache hits (ChatDone): %s; hit rate %.1f%% of %lld turns\n", CountsByName(s.hits_by_tier).c_str(),
               s.turns_ok > 0 ? 100.0 * s.Hits() / s.turns_ok : 0.0, static_cast<long long>(s.turns_ok));
  if (s.server) {
    const ServerCounters& c = *s.server;
    std::string hits, codes;
    for (const auto& [k, v] : c.hits_by_tier) absl::StrAppend(&hits, hits.empty() ? "" : ", ", k, " ", v);
    for (const auto& [k, v] : c.requests_by_code) absl::StrAppend(&codes, codes.empty() ? "" : ", ", k, " ", v);
    std::fprintf(out, "  /metrics over the run: prefill %.0f computed, %.0f reused; %.0f lookups, hits %s; "
                 "%.0f generated; requests %s\n",
                 c.prefill_computed_tokens, c.prefill_reused_tokens, c.cache_lookups,
                 hits.empty() ? "none" : hits.c_str(), c.generated_tokens, codes.empty() ? "none" : codes.c_str());
    std::fprintf(out, "  host tier at the end: %.1f MiB in %.0f stored sessions (%.2f MiB each); shared system "
                 "prompts: %.0f turns on one, %.0f computed\n",
                 c.host_bytes / (1 << 20), c.host_sessions,
                 c.host_sessions > 0 ? c.host_bytes / c.host_sessions / (1 << 20) : 0.0, c.system_prompt_hits,
                 c.system_prompts_computed);
    if (c.ttft_count > 0) {
      std::fprintf(out, "  server TTFT per turn (mean): queue %.2f ms + prefill %.2f ms (admission %.3f ms)\n",
                   1000 * c.queue_sum_s / c.ttft_count, 1000 * c.prefill_sum_s / c.ttft_count,
                   1000 * c.admit_sum_s / c.ttft_count);
    }
    std::string steps;
    for (const char* kind : {"decode", "mixed", "prefill"}) {
      auto n = c.steps_by_kind.find(kind);
      if (n == c.steps_by_kind.end() || n->second <= 0) continue;
      auto t = c.step_seconds_by_kind.find(kind);
      const double ms = t == c.step_seconds_by_kind.end() ? 0.0 : 1000 * t->second / n->second;
      absl::StrAppend(&steps, steps.empty() ? "" : ", ", kind, " ", n->second, " x ", absl::StrFormat("%.2f", ms),
                      " ms");
    }
    if (!steps.empty()) std::fprintf(out, "  server steps (mean time): %s\n", steps.c_str());
    double step_count = 0;
    for (const auto& [kind, n] : c.steps_by_kind) step_count += n;
    std::string thread;
    for (const char* part : {"forward", "schedule", "emit", "finish", "release", "idle"}) {
      auto t = c.engine_seconds_by_part.find(part);
      if (t == c.engine_seconds_by_part.end() || step_count <= 0) continue;
      absl::StrAppend(&thread, thread.empty() ? "" : ", ", part, " ",
                      absl::StrFormat("%.3f", 1000 * t->second / step_count));
    }
    if (!thread.empty()) std::fprintf(out, "  server engine thread (ms a step): %s\n", thread.c_str());
    if (c.kv_load_bytes > 0 || c.kv_save_bytes > 0) {
      std::fprintf(out, "  cached KV moved: %.1f MiB loaded, %.1f MiB saved", c.kv_load_bytes / (1 << 20),
                   c.kv_save_bytes / (1 << 20));
      if (c.kv_loads > 0) {
        std::fprintf(out, "; %.0f device loads, %.2f ms each (%.1f GB/s), steps stalled %.2f ms per load",
                     c.kv_loads, 1000 * c.kv_load_device_s / c.kv_loads,
                     c.kv_load_device_s > 0 ? c.kv_load_bytes / c.kv_load_device_s / 1e9 : 0.0,
                     1000 * c.kv_load_stall_s / c.kv_loads);
      }
      std::fprintf(out, "\n");
    }
  } else {
    std::fprintf(out, "  /metrics: not scraped\n");
  }
}

void PrintComparison(std::FILE* out, const RunSummary& a, const RunSummary& b) {
  const auto fa = KeyFigures(a);
  const auto fb = KeyFigures(b);
  std::fprintf(out, "  %-24s %14s %14s %10s\n", "", a.label.c_str(), b.label.c_str(), "ratio");
  for (size_t i = 0; i < fa.size(); ++i) {
    std::fprintf(out, "  %-24s %14.1f %14.1f %10s\n", fa[i].first.c_str(), fa[i].second, fb[i].second,
                 Ratio(fa[i].second, fb[i].second).c_str());
  }
}

nlohmann::json SummaryToJson(const RunSummary& s) {
  nlohmann::json j = {
      {"label", s.label},
      {"turns_ok", s.turns_ok},
      {"turns_failed", s.turns_failed},
      {"turns_not_sent", s.turns_not_sent},
      {"errors_by_code", s.errors_by_code},
      {"ttft_client_ms", StatsJson(s.ttft_client_ms)},
      {"ttft_server_ms", StatsJson(s.ttft_server_ms)},
      {"inter_token_ms", StatsJson(s.inter_token_ms)},
      {"e2e_ms", StatsJson(s.e2e_ms)},
      {"wall_s", s.wall_s},
      {"requests_per_s", s.requests_per_s},
      {"output_tokens_per_s", s.output_tokens_per_s},
      {"prompt_tokens", s.prompt_tokens},
      {"cached_tokens", s.cached_tokens},
      {"computed_tokens", s.computed_tokens},
      {"completion_tokens", s.completion_tokens},
      {"hits_by_tier", s.hits_by_tier},
      {"hits", s.Hits()},
  };
  if (s.server) {
    const ServerCounters& c = *s.server;
    j["metrics"] = {{"prefill_computed_tokens", c.prefill_computed_tokens},
                    {"prefill_reused_tokens", c.prefill_reused_tokens},
                    {"cache_lookups", c.cache_lookups},
                    {"generated_tokens", c.generated_tokens},
                    {"hits_by_tier", c.hits_by_tier},
                    {"requests_by_code", c.requests_by_code},
                    {"ttft_count", c.ttft_count},
                    {"ttft_sum_s", c.ttft_sum_s},
                    {"system_prompt_hits", c.system_prompt_hits},
                    {"system_prompts_computed", c.system_prompts_computed},
                    {"queue_sum_s", c.queue_sum_s},
                    {"prefill_sum_s", c.prefill_sum_s},
                    {"admit_sum_s", c.admit_sum_s},
                    {"kv_load_bytes", c.kv_load_bytes},
                    {"kv_save_bytes", c.kv_save_bytes},
                    {"kv_loads", c.kv_loads},
                    {"kv_load_device_s", c.kv_load_device_s},
                    {"kv_load_stall_s", c.kv_load_stall_s},
                    {"host_bytes", c.host_bytes},
                    {"host_sessions", c.host_sessions},
                    {"steps_by_kind", c.steps_by_kind},
                    {"step_seconds_by_kind", c.step_seconds_by_kind},
                    {"engine_seconds_by_part", c.engine_seconds_by_part}};
  }
  return j;
}

}  // namespace strata::server::bench
