#include "storage/sim/trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace strata::storage {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxSyntheticTurns = 100;

bool IsBlank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

absl::Status OpenTrace(const std::string& path, std::ifstream& in) {
  errno = 0;
  in.open(path);
  if (in.is_open()) return absl::OkStatus();
  const int error = errno;
  const std::string message = absl::StrCat("cannot open trace ", path);
  return error == 0 ? absl::NotFoundError(message) : absl::ErrnoToStatus(error, message);
}

absl::Status LineError(const std::string& path, int64_t line_index, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line_index + 1, ": ", problem));
}

// Calls `each(line_index, object)` for every non-blank line of `path`, in file order;
// line_index counts from 0, blank lines included. An error from `each` (or a line that is
// not a JSON object) stops the walk and comes back as InvalidArgument naming the line.
template <typename Fn>
absl::Status ForEachJsonLine(const std::string& path, Fn each) {
  std::ifstream in;
  if (absl::Status s = OpenTrace(path, in); !s.ok()) return s;
  std::string line;
  for (int64_t index = 0; std::getline(in, line); ++index) {
    if (IsBlank(line)) continue;
    const Json object = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!object.is_object()) return LineError(path, index, "not a JSON object");
    if (absl::Status s = each(index, object); !s.ok()) return LineError(path, index, s.message());
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("reading trace ", path, " failed"));
  return absl::OkStatus();
}

absl::Status GetTimestamp(const Json& object, double* ms) {
  auto it = object.find("timestamp");
  if (it == object.end()) return absl::InvalidArgumentError("missing `timestamp`");
  if (!it->is_number()) return absl::InvalidArgumentError("`timestamp` is not a number");
  *ms = it->get<double>();
  if (!std::isfinite(*ms)) return absl::InvalidArgumentError("`timestamp` is not finite");
  return absl::OkStatus();
}

absl::Status GetLength(const Json& object, const char* field, int64_t* tokens) {
  auto it = object.find(field);
  if (it == object.end()) return absl::InvalidArgumentError(absl::StrCat("missing `", field, "`"));
  if (!it->is_number_integer()) return absl::InvalidArgumentError(absl::StrCat("`", field, "` is not an integer"));
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("`", field, "` is too large"));
  }
  *tokens = it->get<int64_t>();
  if (*tokens < 0) return absl::InvalidArgumentError(absl::StrCat("`", field, "` is negative (", *tokens, ")"));
  return absl::OkStatus();
}

absl::Status GetHashIds(const Json& object, std::vector<int64_t>* ids) {
  auto it = object.find("hash_ids");
  if (it == object.end()) return absl::InvalidArgumentError("missing `hash_ids`");
  if (!it->is_array()) return absl::InvalidArgumentError("`hash_ids` is not an array");
  ids->reserve(it->size());
  for (const Json& id : *it) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("`hash_ids`[", ids->size(), "] is not an integer"));
    }
    // Ids are only compared, so an unsigned id above INT64_MAX may wrap.
    ids->push_back(id.is_number_unsigned() ? static_cast<int64_t>(id.get<uint64_t>()) : id.get<int64_t>());
  }
  return absl::OkStatus();
}

// One line of the plain session format (or one synthetic turn).
struct SessionTurn {
  double arrival_ms = 0;
  std::string session_id;
  int64_t new_tokens = 0;
  int64_t output_tokens = 0;
};

// Resolves turns, in arrival order, into a Trace whose sessions' histories accumulate.
Trace Accumulate(std::vector<SessionTurn> turns) {
  std::stable_sort(turns.begin(), turns.end(),
                   [](const SessionTurn& a, const SessionTurn& b) { return a.arrival_ms < b.arrival_ms; });
  Trace trace;
  trace.requests.reserve(turns.size());
  absl::flat_hash_map<std::string, int64_t> stored_tokens;  // by session: its KV after its latest turn
  for (SessionTurn& turn : turns) {
    int64_t& stored = stored_tokens[turn.session_id];
    TraceRequest r;
    r.arrival_ms = turn.arrival_ms;
    r.reusable_tokens = stored;
    r.context_tokens = stored + turn.new_tokens;
    r.output_tokens = turn.output_tokens;
    r.session_id = std::move(turn.session_id);
    stored = r.context_tokens + r.output_tokens;
    trace.requests.push_back(std::move(r));
  }
  trace.sessions = static_cast<int64_t>(stored_tokens.size());
  return trace;
}

// Why `r` cannot be written in the session format (to be read back), or null.
const char* WriteProblem(const TraceRequest& r) {
  if (!std::isfinite(r.arrival_ms)) return "arrival_ms is not finite";
  if (r.session_id.empty()) return "session_id is empty";
  if (r.reusable_tokens < 0 || r.output_tokens < 0) return "a token count is negative";
  if (r.context_tokens < r.reusable_tokens) return "reusable_tokens exceed context_tokens";
  return nullptr;
}

// A hash of a list of hash ids, extended one id at a time (a splitmix64 finalizer).
constexpr uint64_t kEmptyListHash = 0x9e3779b97f4a7c15ull;
uint64_t ExtendListHash(uint64_t hash, int64_t id) {
  uint64_t x = hash * 0xff51afd7ed558ccdull + static_cast<uint64_t>(id);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The Mooncake sessions seen so far, each with its latest request's hash_ids, indexed by
// the hash of that whole list: a request looks up the hash of each of its prefixes, longest
// first, and compares the lists themselves, since hashes may collide.
class MooncakeSessions {
 public:
  struct Resolved {
    std::string session_id;
    int64_t reused_blocks = 0;
  };

  // Resolves a request with `ids` (the session's latest list becomes `ids`), starting
  // session `new_session_id` when no session's latest list is a non-empty prefix of `ids`.
  Resolved Resolve(std::vector<int64_t> ids, std::string new_session_id) {
    std::vector<uint64_t> prefix_hash(ids.size() + 1, kEmptyListHash);
    for (size_t i = 0; i < ids.size(); ++i) prefix_hash[i + 1] = ExtendListHash(prefix_hash[i], ids[i]);
    const size_t match = LongestPrefixSession(ids, prefix_hash);
    size_t s = match;
    int64_t reused_blocks = 0;
    if (match == kNone) {
      s = sessions_.size();
      sessions_.push_back(Session{std::move(new_session_id), {}, 0, 0});
    } else {
      reused_blocks = static_cast<int64_t>(sessions_[s].ids.size());
      Unindex(s);
    }
    sessions_[s].ids = std::move(ids);
    sessions_[s].list_hash = prefix_hash.back();
    sessions_[s].set_at = ++updates_;
    if (!sessions_[s].ids.empty()) by_list_hash_[sessions_[s].list_hash].push_back(s);
    return Resolved{sessions_[s].id, reused_blocks};
  }

  int64_t size() const { return static_cast<int64_t>(sessions_.size()); }

 private:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();

  struct Session {
    std::string id;
    std::vector<int64_t> ids;  // its latest request's hash_ids
    uint64_t list_hash = 0;    // ExtendListHash over `ids`
    int64_t set_at = 0;        // when `ids` was set, for ties
  };

  size_t LongestPrefixSession(const std::vector<int64_t>& ids, const std::vector<uint64_t>& prefix_hash) const {
    for (size_t len = ids.size(); len >= 1; --len) {
      auto it = by_list_hash_.find(prefix_hash[len]);
      if (it == by_list_hash_.end()) continue;
      size_t best = kNone;
      for (size_t s : it->second) {
        const std::vector<int64_t>& list = sessions_[s].ids;
        if (list.size() != len || !std::equal(list.begin(), list.end(), ids.begin())) continue;
        if (best == kNone || sessions_[s].set_at > sessions_[best].set_at) best = s;
      }
      if (best != kNone) return best;
    }
    return kNone;
  }

  void Unindex(size_t s) {
    if (sessions_[s].ids.empty()) return;
    auto it = by_list_hash_.find(sessions_[s].list_hash);
    std::vector<size_t>& bucket = it->second;
    bucket.erase(std::find(bucket.begin(), bucket.end(), s));
    if (bucket.empty()) by_list_hash_.erase(it);
  }

  std::vector<Session> sessions_;
  absl::flat_hash_map<uint64_t, std::vector<size_t>> by_list_hash_;  // sessions with a non-empty list
  int64_t updates_ = 0;
};

// Inverse-CDF sampling from 53-bit uniform doubles, so that a seed gives the same trace
// whatever the standard library's distributions do.
class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}

  // Uniform in the open interval (0, 1).
  double Uniform() { return (static_cast<double>(rng_() >> 11) + 0.5) * 0x1p-53; }
  double Exponential(double mean) { return -mean * std::log(Uniform()); }
  // Failures before the first success of Bernoulli trials, with the given mean, at most `cap`.
  int64_t Geometric(double mean, int64_t cap) {
    if (mean <= 0) return 0;
    const double failures = std::floor(std::log(Uniform()) / std::log1p(-1.0 / (1.0 + mean)));
    return static_cast<int64_t>(std::min(failures, static_cast<double>(cap)));
  }
  // An exponential token count with the given mean, rounded, at least 1.
  int64_t Tokens(double mean) { return std::max<int64_t>(1, std::llround(Exponential(mean))); }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

absl::StatusOr<Trace> LoadMooncakeTrace(const std::string& path, int64_t block_tokens) {
  if (block_tokens <= 0) return absl::InvalidArgumentError(absl::StrCat("block_tokens is ", block_tokens));
  struct Line {
    int64_t index = 0;
    double arrival_ms = 0;
    int64_t input_tokens = 0;
    int64_t output_tokens = 0;
    std::vector<int64_t> ids;
  };
  std::vector<Line> lines;
  absl::Status status = ForEachJsonLine(path, [&](int64_t index, const Json& object) {
    Line l;
    l.index = index;
    absl::Status s = GetTimestamp(object, &l.arrival_ms);
    if (s.ok()) s = GetLength(object, "input_length", &l.input_tokens);
    if (s.ok()) s = GetLength(object, "output_length", &l.output_tokens);
    if (s.ok()) s = GetHashIds(object, &l.ids);
    if (s.ok()) lines.push_back(std::move(l));
    return s;
  });
  if (!status.ok()) return status;
  std::stable_sort(lines.begin(), lines.end(),
                   [](const Line& a, const Line& b) { return a.arrival_ms < b.arrival_ms; });

  Trace trace;
  trace.requests.reserve(lines.size());
  MooncakeSessions sessions;
  for (Line& l : lines) {
    MooncakeSessions::Resolved resolved = sessions.Resolve(std::move(l.ids), absl::StrCat("m", l.index));
    TraceRequest r;
    r.arrival_ms = l.arrival_ms;
    r.session_id = std::move(resolved.session_id);
    r.context_tokens = l.input_tokens;
    // min(reused_blocks x block_tokens, input_tokens), without overflow.
    r.reusable_tokens =
        resolved.reused_blocks > l.input_tokens / block_tokens ? l.input_tokens : resolved.reused_blocks * block_tokens;
    r.output_tokens = l.output_tokens;
    trace.requests.push_back(std::move(r));
  }
  trace.sessions = sessions.size();
  return trace;
}

absl::StatusOr<Trace> LoadSessionTrace(const std::string& path) {
  std::vector<SessionTurn> turns;
  absl::Status status = ForEachJsonLine(path, [&](int64_t, const Json& object) -> absl::Status {
    SessionTurn t;
    if (absl::Status s = GetTimestamp(object, &t.arrival_ms); !s.ok()) return s;
    auto id = object.find("session_id");
    if (id == object.end()) return absl::InvalidArgumentError("missing `session_id`");
    if (!id->is_string() || id->get_ref<const std::string&>().empty()) {
      return absl::InvalidArgumentError("`session_id` is not a non-empty string");
    }
    t.session_id = id->get<std::string>();
    if (absl::Status s = GetLength(object, "input_length", &t.new_tokens); !s.ok()) return s;
    if (absl::Status s = GetLength(object, "output_length", &t.output_tokens); !s.ok()) return s;
    turns.push_back(std::move(t));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return Accumulate(std::move(turns));
}

absl::StatusOr<Trace> LoadTrace(const std::string& path) {
  std::ifstream in;
  if (absl::Status s = OpenTrace(path, in); !s.ok()) return s;
  std::string line;
  for (int64_t index = 0; std::getline(in, line); ++index) {
    if (IsBlank(line)) continue;
    const Json object = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!object.is_object()) return LineError(path, index, "not a JSON object");
    if (object.contains("hash_ids")) return LoadMooncakeTrace(path);
    if (object.contains("session_id")) return LoadSessionTrace(path);
    return LineError(path, index, "neither the Mooncake format (`hash_ids`) nor the session format (`session_id`)");
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("reading trace ", path, " failed"));
  return absl::InvalidArgumentError(absl::StrCat(path, ": no requests, so no format to recognise"));
}

absl::Status WriteSessionTrace(const Trace& trace, const std::string& path) {
  // The whole file is made in memory first, so a bad request leaves nothing behind.
  std::string text;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& r = trace.requests[i];
    const char* problem = WriteProblem(r);
    if (problem == nullptr) {
      const Json object = {{"timestamp", r.arrival_ms},
                           {"session_id", r.session_id},
                           {"input_length", r.context_tokens - r.reusable_tokens},
                           {"output_length", r.output_tokens}};
      try {
        absl::StrAppend(&text, object.dump(), "\n");
      } catch (const Json::exception&) {  // dump() throws on invalid UTF-8
        problem = "session_id is not valid UTF-8";
      }
    }
    if (problem != nullptr) return absl::InvalidArgumentError(absl::StrCat("request ", i, ": ", problem));
  }
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out.is_open()) {
    const int error = errno;
    const std::string message = absl::StrCat("cannot create ", path);
    return error == 0 ? absl::UnavailableError(message) : absl::ErrnoToStatus(error, message);
  }
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (out.fail()) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

absl::Status SyntheticTraceOptions::Validate() const {
  const auto invalid = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("SyntheticTraceOptions: ", what));
  };
  if (sessions < 0) return invalid("sessions < 0");
  if (!(mean_turns >= 1) || !std::isfinite(mean_turns)) return invalid("mean_turns must be finite and >= 1");
  if (!(session_rate_per_s > 0) || !std::isfinite(session_rate_per_s)) {
    return invalid("session_rate_per_s must be finite and > 0");
  }
  if (!(mean_prompt_tokens >= 1) || !std::isfinite(mean_prompt_tokens)) {
    return invalid("mean_prompt_tokens must be finite and >= 1");
  }
  if (!(mean_output_tokens >= 1) || !std::isfinite(mean_output_tokens)) {
    return invalid("mean_output_tokens must be finite and >= 1");
  }
  if (!(mean_think_s >= 0) || !std::isfinite(mean_think_s)) return invalid("mean_think_s must be finite and >= 0");
  if (max_context_tokens < 1) return invalid("max_context_tokens < 1");
  return absl::OkStatus();
}

Trace SyntheticTrace(const SyntheticTraceOptions& options) {
  if (!options.Validate().ok()) return Trace{};
  Sampler sampler(options.seed);
  std::vector<SessionTurn> turns;
  double start_ms = 0;
  for (int64_t s = 0; s < options.sessions; ++s) {
    start_ms += sampler.Exponential(1e3 / options.session_rate_per_s);
    const int64_t session_turns = 1 + sampler.Geometric(options.mean_turns - 1, kMaxSyntheticTurns - 1);
    const std::string id = absl::StrCat("s", s);
    double at_ms = start_ms;
    int64_t stored = 0;  // the session's KV after its previous turn, as Accumulate will count it
    for (int64_t k = 0; k < session_turns; ++k) {
      int64_t input = sampler.Tokens(options.mean_prompt_tokens);
      const int64_t output = sampler.Tokens(options.mean_output_tokens);
      if (k == 0) {
        input = std::min(input, options.max_context_tokens);
      } else if (stored + input > options.max_context_tokens) {
        break;
      }
      turns.push_back(SessionTurn{at_ms, id, input, output});
      stored += input + output;
      at_ms += sampler.Exponential(1e3 * options.mean_think_s);
    }
  }
  return Accumulate(std::move(turns));
}

}  // namespace strata::storage
