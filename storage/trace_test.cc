#include "storage/trace.h"

#include <fstream>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"

namespace strata::storage {
namespace {

class TraceTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_{"strata-trace"};
};

TEST_F(TraceTest, MooncakeRequestsContinueTheSessionWhoseBlocksTheyExtend) {
  const std::string path = Write("m.jsonl",
                                 R"({"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": 5, "input_length": 900, "output_length": 7, "hash_ids": [0, 9]}

{"timestamp": 10, "input_length": 2000, "output_length": 20, "hash_ids": [0, 1, 2, 3]}
{"timestamp": 20, "input_length": 3000, "output_length": 30, "hash_ids": [0, 1, 2, 3, 4, 5]}
{"timestamp": 30, "input_length": 700, "output_length": 5, "hash_ids": [0, 1, 2, 3, 4, 5, 6]}
)");
  auto t = LoadMooncakeTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->requests.size(), 5u);
  EXPECT_EQ(t->sessions, 2);
  EXPECT_EQ(t->requests[0].session_id, "m0");
  EXPECT_EQ(t->requests[0].reusable_tokens, 0);
  // Shares only block 0 with m0, whose list is [0, 1]: a new session.
  EXPECT_EQ(t->requests[1].session_id, "m1");
  EXPECT_EQ(t->requests[1].reusable_tokens, 0);
  EXPECT_EQ(t->requests[2].session_id, "m0");
  EXPECT_EQ(t->requests[2].reusable_tokens, 2 * 512);
  EXPECT_EQ(t->requests[3].session_id, "m0");
  EXPECT_EQ(t->requests[3].reusable_tokens, 4 * 512);
  // Capped by the input length.
  EXPECT_EQ(t->requests[4].session_id, "m0");
  EXPECT_EQ(t->requests[4].reusable_tokens, 700);
  EXPECT_EQ(t->requests[4].context_tokens, 700);
  EXPECT_EQ(t->requests[4].output_tokens, 5);
}

TEST_F(TraceTest, SessionFormatAccumulatesHistoryInTimestampOrder) {
  const std::string path = Write("s.jsonl",
                                 R"({"timestamp": 20, "session_id": "a", "input_length": 5, "output_length": 7}
{"timestamp": 0, "session_id": "a", "input_length": 10, "output_length": 20}
{"timestamp": 10, "session_id": "b", "input_length": 3, "output_length": 4}
)");
  auto t = LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_EQ(t->sessions, 2);
  EXPECT_EQ(t->requests[0].session_id, "a");
  EXPECT_EQ(t->requests[0].context_tokens, 10);
  EXPECT_EQ(t->requests[1].session_id, "b");
  EXPECT_EQ(t->requests[2].session_id, "a");
  EXPECT_EQ(t->requests[2].reusable_tokens, 30);
  EXPECT_EQ(t->requests[2].context_tokens, 35);
  EXPECT_EQ(t->requests[2].output_tokens, 7);
}

TEST_F(TraceTest, BadLinesAreInvalidArgumentNamingTheLine) {
  auto bad_json = LoadTrace(Write("b1.jsonl", "{\"timestamp\": 0, \"session_id\": \"a\", \"input_length\": 1, "
                                              "\"output_length\": 1}\n{oops\n"));
  EXPECT_TRUE(absl::IsInvalidArgument(bad_json.status()));
  EXPECT_NE(bad_json.status().message().find(":2:"), std::string::npos) << bad_json.status();
  auto missing = LoadSessionTrace(Write("b2.jsonl", R"({"timestamp": 0, "session_id": "a", "input_length": 1})"));
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
  EXPECT_NE(missing.status().message().find("output_length"), std::string::npos);
  auto negative = LoadMooncakeTrace(
      Write("b3.jsonl", R"({"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []})"));
  EXPECT_TRUE(absl::IsInvalidArgument(negative.status()));
  auto bad_id = LoadMooncakeTrace(
      Write("b4.jsonl", R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": ["x"]})"));
  EXPECT_TRUE(absl::IsInvalidArgument(bad_id.status()));
  EXPECT_TRUE(absl::IsNotFound(LoadTrace(dir_.path() + "/none.jsonl").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LoadTrace(Write("b5.jsonl", R"({"timestamp": 0})")).status()));
}

TEST_F(TraceTest, SyntheticTraceHasTheAskedShapeAndIsDeterministic) {
  SyntheticTraceOptions o;
  Trace t = SyntheticTrace(o);
  EXPECT_EQ(t.sessions, o.sessions);
  const double mean_turns = static_cast<double>(t.requests.size()) / static_cast<double>(t.sessions);
  EXPECT_NEAR(mean_turns, o.mean_turns, 0.1 * o.mean_turns);
  absl::flat_hash_map<std::string, int64_t> held;
  for (size_t i = 0; i < t.requests.size(); ++i) {
    const TraceRequest& r = t.requests[i];
    if (i > 0) EXPECT_LE(t.requests[i - 1].arrival_ms, r.arrival_ms);
    EXPECT_EQ(r.reusable_tokens, held[r.session_id]);
    EXPECT_GT(r.context_tokens, r.reusable_tokens);
    EXPECT_LE(r.context_tokens, o.max_context_tokens);
    held[r.session_id] = r.context_tokens + r.output_tokens;
  }
  Trace again = SyntheticTrace(o);
  ASSERT_EQ(again.requests.size(), t.requests.size());
  EXPECT_EQ(again.requests[100].context_tokens, t.requests[100].context_tokens);
  o.seed = 2;
  Trace other = SyntheticTrace(o);
  EXPECT_NE(other.requests.size() == t.requests.size() &&
                other.requests[100].context_tokens == t.requests[100].context_tokens,
            true);
  // Written and read back, the same trace.
  const std::string path = dir_.path() + "/synthetic.jsonl";
  ASSERT_TRUE(WriteSessionTrace(t, path).ok());
  auto back = LoadTrace(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->requests.size(), t.requests.size());
  for (size_t i = 0; i < t.requests.size(); i += 97) {
    EXPECT_EQ(back->requests[i].session_id, t.requests[i].session_id);
    EXPECT_EQ(back->requests[i].context_tokens, t.requests[i].context_tokens);
    EXPECT_EQ(back->requests[i].reusable_tokens, t.requests[i].reusable_tokens);
  }
}

}  // namespace
}  // namespace strata::storage
