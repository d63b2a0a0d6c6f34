#include "storage/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace strata::storage {
namespace {

using Json = nlohmann::json;

// Reads `path` line by line; `each(line_number, parsed)` for every non-blank line.
template <typename Fn>
absl::Status ForEachJsonLine(const std::string& path, Fn each) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace ", path));
  std::string line;
  for (int64_t n = 0; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n + 1, ": not a JSON object"));
    }
    if (absl::Status s = each(n, j); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n + 1, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status GetNumber(const Json& j, const char* field, double* out) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number()) return absl::InvalidArgumentError(absl::StrCat("`", field, "` is not a number"));
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::Status GetLength(const Json& j, const char* field, int64_t* out) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("`", field, "` is not an integer"));
  }
  *out = it->get<int64_t>();
  if (*out < 0) return absl::InvalidArgumentError(absl::StrCat("`", field, "` is negative"));
  return absl::OkStatus();
}

void SortAndCount(Trace& t) {
  std::stable_sort(t.requests.begin(), t.requests.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_ms < b.arrival_ms; });
  absl::flat_hash_map<std::string, bool> seen;
  for (const TraceRequest& r : t.requests) seen[r.session_id] = true;
  t.sessions = static_cast<int64_t>(seen.size());
}

struct SessionLine {
  double timestamp = 0;
  std::string session_id;
  int64_t input = 0;
  int64_t output = 0;
};

// Resolves turns (in timestamp order) into a Trace with accumulated history.
Trace Accumulate(std::vector<SessionLine> lines) {
  std::stable_sort(lines.begin(), lines.end(),
                   [](const SessionLine& a, const SessionLine& b) { return a.timestamp < b.timestamp; });
  Trace t;
  absl::flat_hash_map<std::string, int64_t> held;
  for (const SessionLine& l : lines) {
    TraceRequest r;
    r.arrival_ms = l.timestamp;
    r.session_id = l.session_id;
    auto it = held.find(l.session_id);
    r.reusable_tokens = it == held.end() ? 0 : it->second;
    r.context_tokens = r.reusable_tokens + l.input;
    r.output_tokens = l.output;
    held[l.session_id] = r.context_tokens + r.output_tokens;
    t.requests.push_back(std::move(r));
  }
  SortAndCount(t);
  return t;
}

// A hash of a list of block ids (FNV-1a over the 64-bit values), for prefix lookup.
uint64_t Extend(uint64_t h, int64_t id) {
  uint64_t v = static_cast<uint64_t>(id);
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}
constexpr uint64_t kEmptyHash = 14695981039346656037ull;

}  // namespace

absl::StatusOr<Trace> LoadMooncakeTrace(const std::string& path, int64_t block_tokens) {
  if (block_tokens <= 0) return absl::InvalidArgumentError("block_tokens must be positive");
  struct Line {
    double timestamp;
    int64_t input, output, line;
    std::vector<int64_t> ids;
  };
  std::vector<Line> lines;
  absl::Status s = ForEachJsonLine(path, [&](int64_t n, const Json& j) -> absl::Status {
    Line l{0, 0, 0, n, {}};
    if (absl::Status e = GetNumber(j, "timestamp", &l.timestamp); !e.ok()) return e;
    if (absl::Status e = GetLength(j, "input_length", &l.input); !e.ok()) return e;
    if (absl::Status e = GetLength(j, "output_length", &l.output); !e.ok()) return e;
    auto ids = j.find("hash_ids");
    if (ids == j.end() || !ids->is_array()) return absl::InvalidArgumentError("`hash_ids` is not an array");
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) return absl::InvalidArgumentError("`hash_ids` holds a non-integer");
      l.ids.push_back(id.get<int64_t>());
    }
    lines.push_back(std::move(l));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) { return a.timestamp < b.timestamp; });

  // Every session's latest hash_ids list, indexed by the hash of the whole list; a new
  // request looks up each of its prefixes, longest first.
  struct Latest {
    std::string session;
    std::vector<int64_t> ids;
    int64_t order = 0;  // when it became this session's latest (ties: most recent wins)
  };
  absl::flat_hash_map<uint64_t, std::vector<Latest>> by_hash;
  absl::flat_hash_map<std::string, uint64_t> hash_of_session;
  Trace t;
  int64_t order = 0;
  for (const Line& l : lines) {
    std::vector<uint64_t> prefix_hash(l.ids.size() + 1);
    prefix_hash[0] = kEmptyHash;
    for (size_t i = 0; i < l.ids.size(); ++i) prefix_hash[i + 1] = Extend(prefix_hash[i], l.ids[i]);
    const Latest* match = nullptr;
    for (size_t len = l.ids.size(); len >= 1 && match == nullptr; --len) {
      auto it = by_hash.find(prefix_hash[len]);
      if (it == by_hash.end()) continue;
      for (const Latest& cand : it->second) {
        if (cand.ids.size() != len || !std::equal(cand.ids.begin(), cand.ids.end(), l.ids.begin())) continue;
        if (match == nullptr || cand.order > match->order) match = &cand;
      }
    }
    TraceRequest r;
    r.arrival_ms = l.timestamp;
    r.context_tokens = l.input;
    r.output_tokens = l.output;
    if (match != nullptr) {
      r.session_id = match->session;
      r.reusable_tokens = std::min(static_cast<int64_t>(match->ids.size()) * block_tokens, l.input);
    } else {
      r.session_id = absl::StrCat("m", l.line);
    }
    // The session's latest list is now this request's.
    if (auto old = hash_of_session.find(r.session_id); old != hash_of_session.end()) {
      auto& bucket = by_hash[old->second];
      bucket.erase(std::remove_if(bucket.begin(), bucket.end(),
                                  [&](const Latest& x) { return x.session == r.session_id; }),
                   bucket.end());
      if (bucket.empty()) by_hash.erase(old->second);
    }
    if (!l.ids.empty()) {
      by_hash[prefix_hash.back()].push_back(Latest{r.session_id, l.ids, ++order});
      hash_of_session[r.session_id] = prefix_hash.back();
    } else {
      hash_of_session.erase(r.session_id);
    }
    t.requests.push_back(std::move(r));
  }
  SortAndCount(t);
  return t;
}

absl::StatusOr<Trace> LoadSessionTrace(const std::string& path) {
  std::vector<SessionLine> lines;
  absl::Status s = ForEachJsonLine(path, [&](int64_t, const Json& j) -> absl::Status {
    SessionLine l;
    if (absl::Status e = GetNumber(j, "timestamp", &l.timestamp); !e.ok()) return e;
    auto id = j.find("session_id");
    if (id == j.end() || !id->is_string() || id->get<std::string>().empty()) {
      return absl::InvalidArgumentError("`session_id` is not a non-empty string");
    }
    l.session_id = id->get<std::string>();
    if (absl::Status e = GetLength(j, "input_length", &l.input); !e.ok()) return e;
    if (absl::Status e = GetLength(j, "output_length", &l.output); !e.ok()) return e;
    lines.push_back(std::move(l));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return Accumulate(std::move(lines));
}

absl::StatusOr<Trace> LoadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace ", path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) {
      if (j.contains("hash_ids")) return LoadMooncakeTrace(path);
      if (j.contains("session_id")) return LoadSessionTrace(path);
    }
    break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": neither the Mooncake format (hash_ids) nor the session format (session_id)"));
}

absl::Status WriteSessionTrace(const Trace& trace, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  for (const TraceRequest& r : trace.requests) {
    Json j = {{"timestamp", r.arrival_ms},
              {"session_id", r.session_id},
              {"input_length", r.context_tokens - r.reusable_tokens},
              {"output_length", r.output_tokens}};
    out << j.dump() << '\n';
  }
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

Trace SyntheticTrace(const SyntheticTraceOptions& o) {
  std::mt19937_64 rng(o.seed);
  // A uniform double in (0, 1) from 53 random bits.
  auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  auto exponential = [&](double mean) { return -mean * std::log(uniform()); };
  std::vector<SessionLine> lines;
  double start_s = 0;
  // Turns = 1 + geometric(p) with mean 1/p - 1 = mean_turns - 1.
  const double p = 1.0 / std::max(1.0, o.mean_turns);
  for (int64_t s = 0; s < o.sessions; ++s) {
    start_s += exponential(1.0 / o.session_rate_per_s);
    int64_t turns = 1;
    if (p < 1) turns += static_cast<int64_t>(std::floor(std::log(uniform()) / std::log(1 - p)));
    turns = std::min<int64_t>(turns, 100);
    double at_s = start_s;
    int64_t context = 0;
    for (int64_t k = 0; k < turns; ++k) {
      const int64_t input = std::max<int64_t>(1, std::llround(exponential(o.mean_prompt_tokens)));
      const int64_t output = std::max<int64_t>(1, std::llround(exponential(o.mean_output_tokens)));
      if (context + input > o.max_context_tokens) break;
      lines.push_back(SessionLine{at_s * 1e3, absl::StrCat("s", s), input, output});
      context += input + output;
      at_s += exponential(o.mean_think_s);
    }
  }
  return Accumulate(std::move(lines));
}

}  // namespace strata::storage
