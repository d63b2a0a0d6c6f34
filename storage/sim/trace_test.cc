#include "storage/sim/trace.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"

namespace strata::storage {
namespace {

std::string WriteFile(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// One line per request, "session reusable/context+output", for comparisons that print well.
std::vector<std::string> Summary(const Trace& trace) {
  std::vector<std::string> out;
  for (const TraceRequest& r : trace.requests) {
    out.push_back(absl::StrCat(r.session_id, " ", r.reusable_tokens, "/", r.context_tokens, "+", r.output_tokens));
  }
  return out;
}

std::vector<double> Arrivals(const Trace& trace) {
  std::vector<double> out;
  for (const TraceRequest& r : trace.requests) out.push_back(r.arrival_ms);
  return out;
}

void ExpectInvalidArgument(const absl::StatusOr<Trace>& trace, const std::string& needle) {
  EXPECT_TRUE(absl::IsInvalidArgument(trace.status())) << trace.status();
  EXPECT_NE(std::string(trace.status().message()).find(needle), std::string::npos)
      << "message lacks \"" << needle << "\": " << trace.status();
}

TEST(TraceTest, MooncakeRequestContinuesTheSessionWhoseLatestBlocksAreItsPrefix) {
  testing::TempDir dir("strata-trace");
  // A 3-turn conversation (system block 1, then growing), an unrelated request, and a
  // request sharing only the system block, which then has a turn of its own.
  const std::string path =
      WriteFile(dir, "m.jsonl", R"({"timestamp": 0, "input_length": 1200, "output_length": 50, "hash_ids": [1, 2, 3]}
{"timestamp": 1, "input_length": 800, "output_length": 20, "hash_ids": [7, 8]}
{"timestamp": 2, "input_length": 2000, "output_length": 40, "hash_ids": [1, 2, 3, 4]}
{"timestamp": 3, "input_length": 900, "output_length": 30, "hash_ids": [1, 9]}

{"timestamp": 5, "input_length": 3000, "output_length": 10, "hash_ids": [1, 2, 3, 4, 5, 6]}
{"timestamp": 6, "input_length": 1100, "output_length": 5, "hash_ids": [1, 9, 10], "extra": "ignored"}
)");
  absl::StatusOr<Trace> trace = LoadMooncakeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(Summary(*trace), (std::vector<std::string>{"m0 0/1200+50", "m1 0/800+20", "m0 1536/2000+40", "m3 0/900+30",
                                                       "m0 2048/3000+10", "m3 1024/1100+5"}));
  EXPECT_EQ(Arrivals(*trace), (std::vector<double>{0, 1, 2, 3, 5, 6}));
  EXPECT_EQ(trace->sessions, 3);
}

TEST(TraceTest, MooncakeReusableTokensAreCappedByInputLength) {
  testing::TempDir dir("strata-trace");
  const std::string path =
      WriteFile(dir, "m.jsonl", R"({"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 1, "input_length": 700, "output_length": 2, "hash_ids": [1, 2, 3]}
{"timestamp": 2, "input_length": 1600, "output_length": 3, "hash_ids": [1, 2, 3, 4]}
{"timestamp": 3, "input_length": 1600, "output_length": 4, "hash_ids": [1, 2, 3, 4]}
)");
  absl::StatusOr<Trace> trace = LoadMooncakeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // The same list again continues the session too (a list is a prefix of itself).
  EXPECT_EQ(Summary(*trace),
            (std::vector<std::string>{"m0 0/1000+1", "m0 700/700+2", "m0 1536/1600+3", "m0 1600/1600+4"}));
  absl::StatusOr<Trace> small_blocks = LoadMooncakeTrace(path, /*block_tokens=*/16);
  ASSERT_TRUE(small_blocks.ok()) << small_blocks.status();
  EXPECT_EQ(Summary(*small_blocks),
            (std::vector<std::string>{"m0 0/1000+1", "m0 32/700+2", "m0 48/1600+3", "m0 64/1600+4"}));
  ExpectInvalidArgument(LoadMooncakeTrace(path, 0), "block_tokens");
}

TEST(TraceTest, MooncakeRequestWithoutHashIdsAlwaysStartsASession) {
  testing::TempDir dir("strata-trace");
  const std::string path =
      WriteFile(dir, "m.jsonl", R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": []}
{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": []}
{"timestamp": 2, "input_length": 600, "output_length": 1, "hash_ids": [4]}
)");
  absl::StatusOr<Trace> trace = LoadMooncakeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(Summary(*trace), (std::vector<std::string>{"m0 0/10+1", "m1 0/10+1", "m2 0/600+1"}));
  EXPECT_EQ(trace->sessions, 3);
}

TEST(TraceTest, MooncakeResolvesInArrivalOrderWhenTimestampsGoBackwards) {
  testing::TempDir dir("strata-trace");
  const std::string path =
      WriteFile(dir, "m.jsonl", R"({"timestamp": 20.5, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}
{"timestamp": 10, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]}
{"timestamp": 10, "input_length": 512, "output_length": 3, "hash_ids": [5]}
{"timestamp": 0.25, "input_length": 512, "output_length": 4, "hash_ids": [5, 6]}
)");
  absl::StatusOr<Trace> trace = LoadMooncakeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // Line 3 ([5, 6]) comes first, so line 2 ([5]) is no continuation of it; lines 1 and 2
  // tie at 10 and keep their file order; line 0 continues line 1's session.
  EXPECT_EQ(Summary(*trace), (std::vector<std::string>{"m3 0/512+4", "m1 0/1024+2", "m2 0/512+3", "m1 1024/1536+1"}));
  EXPECT_EQ(Arrivals(*trace), (std::vector<double>{0.25, 10, 10, 20.5}));
}

// The rule as the header states it, by brute force over every session's latest list.
std::vector<std::string> ResolveByBruteForce(const std::vector<double>& arrival_ms,
                                             const std::vector<std::vector<int64_t>>& hash_ids,
                                             const std::vector<int64_t>& input_tokens, int64_t block_tokens) {
  std::vector<size_t> order(arrival_ms.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return arrival_ms[a] < arrival_ms[b]; });
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> latest;
  std::vector<int64_t> set_at;
  std::vector<std::string> out;
  for (size_t step = 0; step < order.size(); ++step) {
    const std::vector<int64_t>& ids = hash_ids[order[step]];
    int64_t best = -1;
    for (size_t s = 0; s < latest.size(); ++s) {
      const std::vector<int64_t>& list = latest[s];
      if (list.empty() || list.size() > ids.size() || !std::equal(list.begin(), list.end(), ids.begin())) continue;
      if (best < 0 || list.size() > latest[best].size() ||
          (list.size() == latest[best].size() && set_at[s] > set_at[best])) {
        best = static_cast<int64_t>(s);
      }
    }
    int64_t reusable = 0;
    if (best < 0) {
      best = static_cast<int64_t>(latest.size());
      names.push_back(absl::StrCat("m", order[step]));
      latest.emplace_back();
      set_at.push_back(0);
    } else {
      reusable = std::min(static_cast<int64_t>(latest[best].size()) * block_tokens, input_tokens[order[step]]);
    }
    latest[best] = ids;
    set_at[best] = static_cast<int64_t>(step);
    out.push_back(absl::StrCat(names[best], " ", reusable, "/", input_tokens[order[step]], "+1"));
  }
  return out;
}

TEST(TraceTest, MooncakeResolutionMatchesBruteForceOnARandomTrace) {
  testing::TempDir dir("strata-trace");
  std::mt19937_64 rng(7);
  std::vector<std::vector<int64_t>> conversations;
  std::vector<double> arrival_ms;
  std::vector<std::vector<int64_t>> hash_ids;
  std::vector<int64_t> input_tokens;
  int64_t next_block = 100;
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    std::vector<int64_t> ids;
    const uint64_t kind = rng() % 10;
    if (conversations.empty() || kind < 3) {  // a new conversation on one of 3 system prompts
      ids = {static_cast<int64_t>(rng() % 3)};
      for (uint64_t k = rng() % 4; k > 0; --k) ids.push_back(next_block++);
      conversations.push_back(ids);
    } else if (kind < 8) {  // the next turn of a conversation
      std::vector<int64_t>& c = conversations[rng() % conversations.size()];
      for (uint64_t k = rng() % 4; k > 0; --k) c.push_back(next_block++);
      ids = c;
    } else if (kind < 9) {  // an edited turn: part of a conversation, then new blocks
      const std::vector<int64_t>& c = conversations[rng() % conversations.size()];
      ids.assign(c.begin(), c.begin() + static_cast<int64_t>(rng() % (c.size() + 1)));
      for (uint64_t k = 1 + rng() % 2; k > 0; --k) ids.push_back(next_block++);
      conversations.push_back(ids);
    }  // else no blocks at all
    arrival_ms.push_back(static_cast<double>(i / 2 * 10) - (rng() % 5 == 0 ? 25.0 : 0.0));
    input_tokens.push_back(
        std::max<int64_t>(0, static_cast<int64_t>(ids.size()) * 512 - static_cast<int64_t>(rng() % 600)));
    absl::StrAppend(&text, "{\"timestamp\": ", arrival_ms.back(), ", \"input_length\": ", input_tokens.back(),
                    ", \"output_length\": 1, \"hash_ids\": [", absl::StrJoin(ids, ", "), "]}\n");
    hash_ids.push_back(std::move(ids));
  }
  absl::StatusOr<Trace> trace = LoadMooncakeTrace(WriteFile(dir, "random.jsonl", text));
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::vector<std::string> expected = ResolveByBruteForce(arrival_ms, hash_ids, input_tokens, 512);
  const std::vector<std::string> got = Summary(*trace);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "request " << i << " in arrival order";
  absl::flat_hash_set<std::string> sessions;
  for (const TraceRequest& r : trace->requests) sessions.insert(r.session_id);
  EXPECT_EQ(trace->sessions, static_cast<int64_t>(sessions.size()));
}

TEST(TraceTest, SessionFormatAccumulatesHistoryInTimestampOrder) {
  testing::TempDir dir("strata-trace");
  const std::string path =
      WriteFile(dir, "s.jsonl", R"({"timestamp": 20, "session_id": "a", "input_length": 5, "output_length": 7}
{"timestamp": 0, "session_id": "a", "input_length": 10, "output_length": 20}

{"timestamp": 10, "session_id": "b", "input_length": 3, "output_length": 4}
{"timestamp": 10, "session_id": "a", "input_length": 1, "output_length": 2}
)");
  absl::StatusOr<Trace> trace = LoadSessionTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // a: 10 + 20 stored, then 30 + 1 + 2 = 33, then 33 + 5.
  EXPECT_EQ(Summary(*trace), (std::vector<std::string>{"a 0/10+20", "b 0/3+4", "a 30/31+2", "a 33/38+7"}));
  EXPECT_EQ(Arrivals(*trace), (std::vector<double>{0, 10, 10, 20}));
  EXPECT_EQ(trace->sessions, 2);
}

TEST(TraceTest, MalformedLineIsInvalidArgumentNamingItsLine) {
  testing::TempDir dir("strata-trace");
  const std::string session =
      WriteFile(dir, "s.jsonl", R"({"timestamp": 0, "session_id": "a", "input_length": 1, "output_length": 1}

{oops
)");
  ExpectInvalidArgument(LoadSessionTrace(session), "s.jsonl:3: not a JSON object");
  const std::string mooncake =
      WriteFile(dir, "m.jsonl", R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}
[1, 2]
)");
  ExpectInvalidArgument(LoadMooncakeTrace(mooncake), "m.jsonl:2: not a JSON object");
  ExpectInvalidArgument(LoadTrace(mooncake), "m.jsonl:2:");
}

// A JSON object line of `fields` ("\"name\": value") without the one named `skip`.
std::string LineWithout(const std::vector<std::pair<std::string, std::string>>& fields, const std::string& skip) {
  std::vector<std::string> kept;
  for (const auto& [name, value] : fields) {
    if (name != skip) kept.push_back(absl::StrCat("\"", name, "\": ", value));
  }
  return absl::StrCat("{", absl::StrJoin(kept, ", "), "}\n");
}

TEST(TraceTest, MissingFieldIsInvalidArgumentNamingTheField) {
  testing::TempDir dir("strata-trace");
  const std::vector<std::pair<std::string, std::string>> mooncake = {
      {"timestamp", "0"}, {"input_length", "1"}, {"output_length", "1"}, {"hash_ids", "[1]"}};
  for (const auto& [field, value] : mooncake) {
    const std::string path = WriteFile(dir, "m.jsonl", "\n" + LineWithout(mooncake, field));
    ExpectInvalidArgument(LoadMooncakeTrace(path), absl::StrCat("m.jsonl:2: missing `", field, "`"));
  }
  const std::vector<std::pair<std::string, std::string>> session = {
      {"timestamp", "0"}, {"session_id", "\"a\""}, {"input_length", "1"}, {"output_length", "1"}};
  for (const auto& [field, value] : session) {
    const std::string path = WriteFile(dir, "s.jsonl", LineWithout(session, field));
    ExpectInvalidArgument(LoadSessionTrace(path), absl::StrCat("s.jsonl:1: missing `", field, "`"));
  }
}

TEST(TraceTest, NegativeOrFractionalLengthIsInvalidArgument) {
  testing::TempDir dir("strata-trace");
  ExpectInvalidArgument(
      LoadMooncakeTrace(
          WriteFile(dir, "a.jsonl", R"({"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []})")),
      "`input_length` is negative");
  ExpectInvalidArgument(
      LoadSessionTrace(
          WriteFile(dir, "b.jsonl", R"({"timestamp": 0, "session_id": "a", "input_length": 1, "output_length": -3})")),
      "`output_length` is negative");
  ExpectInvalidArgument(
      LoadSessionTrace(
          WriteFile(dir, "c.jsonl", R"({"timestamp": 0, "session_id": "a", "input_length": 1.5, "output_length": 1})")),
      "`input_length` is not an integer");
  ExpectInvalidArgument(
      LoadSessionTrace(WriteFile(
          dir, "d.jsonl",
          R"({"timestamp": 0, "session_id": "a", "input_length": 18446744073709551615, "output_length": 1})")),
      "`input_length` is too large");
}

TEST(TraceTest, NonIntegerHashIdIsInvalidArgument) {
  testing::TempDir dir("strata-trace");
  ExpectInvalidArgument(
      LoadMooncakeTrace(WriteFile(dir, "a.jsonl",
                                  R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, "x"]})")),
      "`hash_ids`[1] is not an integer");
  ExpectInvalidArgument(
      LoadMooncakeTrace(
          WriteFile(dir, "b.jsonl", R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [2.5]})")),
      "`hash_ids`[0] is not an integer");
  ExpectInvalidArgument(
      LoadMooncakeTrace(
          WriteFile(dir, "c.jsonl", R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": 3})")),
      "`hash_ids` is not an array");
}

TEST(TraceTest, MistypedTimestampOrSessionIdIsInvalidArgument) {
  testing::TempDir dir("strata-trace");
  ExpectInvalidArgument(
      LoadSessionTrace(
          WriteFile(dir, "a.jsonl", R"({"timestamp": "0", "session_id": "a", "input_length": 1, "output_length": 1})")),
      "`timestamp` is not a number");
  ExpectInvalidArgument(
      LoadSessionTrace(
          WriteFile(dir, "b.jsonl", R"({"timestamp": 0, "session_id": 5, "input_length": 1, "output_length": 1})")),
      "`session_id` is not a non-empty string");
  ExpectInvalidArgument(
      LoadSessionTrace(
          WriteFile(dir, "c.jsonl", R"({"timestamp": 0, "session_id": "", "input_length": 1, "output_length": 1})")),
      "`session_id` is not a non-empty string");
}

TEST(TraceTest, MissingFileIsNotFound) {
  testing::TempDir dir("strata-trace");
  const std::string path = dir / "none.jsonl";
  EXPECT_TRUE(absl::IsNotFound(LoadMooncakeTrace(path).status())) << LoadMooncakeTrace(path).status();
  EXPECT_TRUE(absl::IsNotFound(LoadSessionTrace(path).status())) << LoadSessionTrace(path).status();
  EXPECT_TRUE(absl::IsNotFound(LoadTrace(path).status())) << LoadTrace(path).status();
}

TEST(TraceTest, LoadTraceChoosesTheFormatByTheFirstNonBlankLine) {
  testing::TempDir dir("strata-trace");
  const std::string mooncake = WriteFile(dir, "m.jsonl", R"(

{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 1, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 3, 4]}
)");
  absl::StatusOr<Trace> m = LoadTrace(mooncake);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Summary(*m), (std::vector<std::string>{"m2 0/1024+1", "m2 1024/2048+1"}));
  absl::StatusOr<Trace> direct = LoadMooncakeTrace(mooncake);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_TRUE(*m == *direct);

  const std::string session =
      WriteFile(dir, "s.jsonl", R"({"timestamp": 0, "session_id": "x", "input_length": 4, "output_length": 1}
{"timestamp": 1, "session_id": "x", "input_length": 2, "output_length": 1}
)");
  absl::StatusOr<Trace> s = LoadTrace(session);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Summary(*s), (std::vector<std::string>{"x 0/4+1", "x 5/7+1"}));
}

TEST(TraceTest, LoadTraceRejectsAnUnknownFormatOrAnEmptyFile) {
  testing::TempDir dir("strata-trace");
  ExpectInvalidArgument(LoadTrace(WriteFile(dir, "a.jsonl", "\n{\"timestamp\": 0, \"input_length\": 1}\n")),
                        "a.jsonl:2: neither");
  ExpectInvalidArgument(LoadTrace(WriteFile(dir, "b.jsonl", "\n \n")), "no requests");
  ExpectInvalidArgument(LoadTrace(WriteFile(dir, "c.jsonl", "")), "no requests");
}

TEST(TraceTest, SyntheticTraceIsDeterministicForASeed) {
  SyntheticTraceOptions options;
  options.sessions = 2000;
  const Trace first = SyntheticTrace(options);
  ASSERT_FALSE(first.requests.empty());
  EXPECT_TRUE(first == SyntheticTrace(options));
  options.seed = 2;
  const Trace other = SyntheticTrace(options);
  EXPECT_FALSE(first == other);
  EXPECT_NE(Arrivals(first), Arrivals(other));
  EXPECT_NE(Summary(first), Summary(other));
}

TEST(TraceTest, SyntheticTraceHasTheAttentionStoreShape) {
  const SyntheticTraceOptions options;  // 9000 sessions, 5.75 turns, 1 session/s, 100 + 300 tokens, 60 s think
  const Trace trace = SyntheticTrace(options);
  EXPECT_EQ(trace.sessions, options.sessions);
  const double turns = static_cast<double>(trace.requests.size());
  EXPECT_NEAR(turns / static_cast<double>(trace.sessions), options.mean_turns, 0.1 * options.mean_turns);

  struct SessionState {
    int64_t stored = 0;
    double last_ms = 0;
  };
  absl::flat_hash_map<std::string, SessionState> sessions;
  double prompt_sum = 0, output_sum = 0, think_sum_ms = 0, last_start_ms = 0;
  int64_t thinks = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& r = trace.requests[i];
    if (i > 0) {
      ASSERT_LE(trace.requests[i - 1].arrival_ms, r.arrival_ms) << "request " << i;
    }
    auto [it, first_turn] = sessions.try_emplace(r.session_id);
    ASSERT_EQ(r.reusable_tokens, it->second.stored) << "request " << i << " of " << r.session_id;
    ASSERT_GE(r.context_tokens, r.reusable_tokens + 1) << "request " << i;
    ASSERT_GE(r.output_tokens, 1) << "request " << i;
    ASSERT_LE(r.context_tokens, options.max_context_tokens) << "request " << i;
    if (first_turn) {
      last_start_ms = std::max(last_start_ms, r.arrival_ms);
    } else {
      think_sum_ms += r.arrival_ms - it->second.last_ms;
      ++thinks;
    }
    it->second.stored = r.context_tokens + r.output_tokens;
    it->second.last_ms = r.arrival_ms;
    prompt_sum += static_cast<double>(r.context_tokens - r.reusable_tokens);
    output_sum += static_cast<double>(r.output_tokens);
  }
  for (int64_t s = 0; s < options.sessions; ++s) EXPECT_TRUE(sessions.contains(absl::StrCat("s", s))) << s;
  EXPECT_NEAR(prompt_sum / turns, options.mean_prompt_tokens, 0.1 * options.mean_prompt_tokens);
  EXPECT_NEAR(output_sum / turns, options.mean_output_tokens, 0.1 * options.mean_output_tokens);
  EXPECT_NEAR(think_sum_ms / static_cast<double>(thinks), options.mean_think_s * 1e3, 0.1 * options.mean_think_s * 1e3);
  // 9000 Poisson starts at 1/s: the last one near 9000 s.
  EXPECT_NEAR(last_start_ms, 9000e3, 0.1 * 9000e3);
}

TEST(TraceTest, SyntheticSessionsEndAtTheContextLimit) {
  SyntheticTraceOptions options;
  options.sessions = 500;
  options.mean_turns = 20;
  options.max_context_tokens = 1000;
  const Trace trace = SyntheticTrace(options);
  EXPECT_EQ(trace.sessions, options.sessions);
  for (const TraceRequest& r : trace.requests) ASSERT_LE(r.context_tokens, options.max_context_tokens);
  // About 400 tokens a turn: a session rarely gets past 3 turns within 1000 tokens.
  EXPECT_LT(static_cast<double>(trace.requests.size()) / static_cast<double>(trace.sessions), 4.0);
}

TEST(TraceTest, SyntheticFirstTurnIsClampedToTheContextLimit) {
  SyntheticTraceOptions options;
  options.sessions = 500;
  options.max_context_tokens = 150;  // below many first prompts (mean 100, exponential)
  const Trace trace = SyntheticTrace(options);
  EXPECT_EQ(trace.sessions, options.sessions);  // no session loses its first turn
  int64_t clamped = 0;
  for (const TraceRequest& r : trace.requests) {
    ASSERT_LE(r.context_tokens, options.max_context_tokens);
    if (r.reusable_tokens == 0 && r.context_tokens == options.max_context_tokens) ++clamped;
  }
  EXPECT_GT(clamped, 50);  // about e^-1.5 = 22% of 500
}

TEST(TraceTest, SyntheticOptionsAreValidated) {
  EXPECT_TRUE(SyntheticTraceOptions().Validate().ok());
  SyntheticTraceOptions bad;
  bad.session_rate_per_s = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(bad.Validate()));
  EXPECT_TRUE(SyntheticTrace(bad) == Trace{});
  bad = SyntheticTraceOptions();
  bad.mean_turns = 0.5;
  EXPECT_TRUE(absl::IsInvalidArgument(bad.Validate()));
  bad = SyntheticTraceOptions();
  bad.max_context_tokens = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(bad.Validate()));
  SyntheticTraceOptions none;
  none.sessions = 0;
  EXPECT_TRUE(SyntheticTrace(none) == Trace{});
}

TEST(TraceTest, WrittenSyntheticTraceLoadsBackEqual) {
  testing::TempDir dir("strata-trace");
  SyntheticTraceOptions options;
  options.sessions = 3000;
  const Trace trace = SyntheticTrace(options);
  const std::string path = dir / "synthetic.jsonl";
  ASSERT_TRUE(WriteSessionTrace(trace, path).ok());
  absl::StatusOr<Trace> back = LoadTrace(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->requests.size(), trace.requests.size());
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    ASSERT_TRUE(back->requests[i] == trace.requests[i])
        << "request " << i << ": " << Summary(*back)[i] << " @" << back->requests[i].arrival_ms << " vs "
        << Summary(trace)[i] << " @" << trace.requests[i].arrival_ms;
  }
  EXPECT_EQ(back->sessions, trace.sessions);
}

TEST(TraceTest, WriteSessionTraceRejectsWhatItCannotRepresent) {
  testing::TempDir dir("strata-trace");
  const std::string path = dir / "out.jsonl";
  Trace trace;
  trace.requests.push_back(TraceRequest{0, "a", 10, 0, 1});
  trace.requests.push_back(TraceRequest{1, "a", 10, 11, 1});  // reuses more than its prompt
  absl::Status s = WriteSessionTrace(trace, path);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(std::string(s.message()).find("request 1"), std::string::npos) << s;
  EXPECT_FALSE(std::filesystem::exists(path));
  trace.requests[1] = TraceRequest{1, "\xff", 10, 0, 1};
  EXPECT_TRUE(absl::IsInvalidArgument(WriteSessionTrace(trace, path)));
  trace.requests[1] = TraceRequest{1, "", 10, 0, 1};
  EXPECT_TRUE(absl::IsInvalidArgument(WriteSessionTrace(trace, path)));
  EXPECT_FALSE(std::filesystem::exists(path));
  trace.requests.pop_back();
  EXPECT_TRUE(absl::IsNotFound(WriteSessionTrace(trace, dir / "no/such/dir.jsonl")));
}

}  // namespace
}  // namespace strata::storage
