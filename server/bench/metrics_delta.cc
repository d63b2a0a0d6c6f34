#include "server/bench/metrics_delta.h"

#include <map>
#include <optional>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"

namespace strata::server::bench {
namespace {

double Get(const MetricsSample& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? 0 : it->second;
}

// The labels of `key` = `name{a="x",b="y"}` (ParsePrometheusText's form), or nullopt when
// the key is another metric.
std::optional<std::map<std::string, std::string>> LabelsOf(std::string_view key, std::string_view name) {
  if (key.size() < name.size() + 2 || key.substr(0, name.size()) != name || key[name.size()] != '{' ||
      key.back() != '}') {
    return std::nullopt;
  }
  std::map<std::string, std::string> labels;
  std::string_view rest = key.substr(name.size() + 1, key.size() - name.size() - 2);
  while (!rest.empty()) {
    const size_t eq = rest.find("=\"");
    if (eq == std::string_view::npos) return std::nullopt;
    std::string label(rest.substr(0, eq)), value;
    size_t i = eq + 2;
    for (; i < rest.size() && rest[i] != '"'; ++i) {
      if (rest[i] == '\\' && i + 1 < rest.size()) ++i;
      value += rest[i];
    }
    labels[label] = value;
    rest = i + 1 < rest.size() ? rest.substr(i + 2) : std::string_view();  // past `",`
  }
  return labels;
}

}  // namespace

absl::StatusOr<MetricsSample> ScrapeMetrics(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("metrics target '", host_port, "' is not host:port"));
  }
  absl::StatusOr<std::string> body = metrics::HttpGet(host_port.substr(0, colon), port, "/metrics");
  if (!body.ok()) return body.status();
  return metrics::ParsePrometheusText(*body);
}

ServerCounters CountersBetween(const MetricsSample& before, const MetricsSample& after) {
  auto delta = [&](const std::string& key) { return Get(after, key) - Get(before, key); };
  ServerCounters c;
  c.prefill_computed_tokens = delta("strata_prefill_tokens_total{source=\"computed\"}");
  c.prefill_reused_tokens = delta("strata_prefill_tokens_total{source=\"reused\"}");
  c.cache_lookups = delta("strata_cache_lookups_total");
  c.generated_tokens = delta("strata_generated_tokens_total");
  // Summed over the tier label (a server of an older release has none: the bare name).
  c.ttft_count = delta("strata_ttft_seconds_count");
  c.ttft_sum_s = delta("strata_ttft_seconds_sum");
  c.queue_sum_s = delta("strata_queue_seconds_sum");
  c.prefill_sum_s = delta("strata_prefill_seconds_sum");
  c.admit_sum_s = delta("strata_admit_seconds_sum");
  c.kv_load_bytes = delta("strata_kv_transfer_bytes_total{direction=\"load\"}");
  c.kv_save_bytes = delta("strata_kv_transfer_bytes_total{direction=\"save\"}");
  c.kv_loads = delta("strata_kv_loads_total");
  c.kv_load_device_s = delta("strata_kv_load_device_seconds_total");
  c.kv_load_stall_s = delta("strata_kv_load_stall_seconds_total");
  c.system_prompt_hits = delta("strata_system_prompt_hits_total");
  c.system_prompts_computed = delta("strata_system_prompt_loads_total{source=\"computed\"}");
  c.host_bytes = Get(after, "strata_tier_bytes{tier=\"host\"}");
  c.host_sessions = Get(after, "strata_sessions{tier=\"host\"}");
  for (const auto& [key, value] : after) {
    if (auto labels = LabelsOf(key, "strata_cache_hits_total"); labels && labels->size() == 1 && labels->contains("tier")) {
      c.hits_by_tier[labels->at("tier")] = value - Get(before, key);
    }
    if (LabelsOf(key, "strata_ttft_seconds_count")) c.ttft_count += value - Get(before, key);
    if (auto labels = LabelsOf(key, "strata_step_seconds_count"); labels && labels->contains("kind")) {
      c.steps_by_kind[labels->at("kind")] = value - Get(before, key);
    }
    if (auto labels = LabelsOf(key, "strata_step_seconds_sum"); labels && labels->contains("kind")) {
      c.step_seconds_by_kind[labels->at("kind")] = value - Get(before, key);
    }
    if (auto labels = LabelsOf(key, "strata_engine_thread_seconds_total"); labels && labels->contains("part")) {
      c.engine_seconds_by_part[labels->at("part")] = value - Get(before, key);
    }
    if (LabelsOf(key, "strata_ttft_seconds_sum")) c.ttft_sum_s += value - Get(before, key);
    // The Chat calls (the bench's own), by code.
    if (auto labels = LabelsOf(key, "strata_requests_total");
        labels && labels->contains("code") && (*labels)["method"] == "strata.v1.ChatService/Chat") {
      if (double d = value - Get(before, key); d != 0) c.requests_by_code[labels->at("code")] += d;
    }
  }
  return c;
}

void Accumulate(ServerCounters& total, const ServerCounters& part) {
  for (double ServerCounters::*f :
       {&ServerCounters::prefill_computed_tokens, &ServerCounters::prefill_reused_tokens,
        &ServerCounters::cache_lookups, &ServerCounters::generated_tokens, &ServerCounters::ttft_count,
        &ServerCounters::ttft_sum_s, &ServerCounters::queue_sum_s, &ServerCounters::prefill_sum_s,
        &ServerCounters::admit_sum_s,
        &ServerCounters::kv_load_bytes, &ServerCounters::kv_save_bytes, &ServerCounters::kv_loads,
        &ServerCounters::kv_load_device_s, &ServerCounters::kv_load_stall_s, &ServerCounters::system_prompt_hits,
        &ServerCounters::system_prompts_computed}) {
    total.*f += part.*f;
  }
  for (const auto& [k, v] : part.hits_by_tier) total.hits_by_tier[k] += v;
  for (const auto& [k, v] : part.requests_by_code) total.requests_by_code[k] += v;
  for (const auto& [k, v] : part.steps_by_kind) total.steps_by_kind[k] += v;
  for (const auto& [k, v] : part.step_seconds_by_kind) total.step_seconds_by_kind[k] += v;
  for (const auto& [k, v] : part.engine_seconds_by_part) total.engine_seconds_by_part[k] += v;
  total.host_bytes = part.host_bytes;
  total.host_sessions = part.host_sessions;
}

}  // namespace strata::server::bench
