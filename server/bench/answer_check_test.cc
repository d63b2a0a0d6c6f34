#include "server/bench/answer_check.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::server::bench {
namespace {

TurnRecord Answered(int session, int turn, std::vector<int32_t> answer) {
  TurnRecord r;
  r.session = session;
  r.turn = turn;
  r.answer_tokens = std::move(answer);
  return r;
}

TurnRecord Failed(int session, int turn) {
  TurnRecord r;
  r.session = session;
  r.turn = turn;
  r.status_code = 14;  // UNAVAILABLE
  r.error = "connection refused";
  return r;
}

TEST(CheckAnswersTest, AllEqualInAnyOrderOfCompletion) {
  RunResult cached, recomputed;
  cached.turns = {Answered(0, 0, {5, 6}), Answered(1, 0, {7}), Answered(0, 1, {8, 9}), Answered(1, 1, {10})};
  recomputed.turns = {Answered(1, 0, {7}), Answered(1, 1, {10}), Answered(0, 0, {5, 6}), Answered(0, 1, {8, 9})};
  const AnswerCheck c = CheckAnswers(cached, recomputed);
  EXPECT_EQ(c.turns_compared, 4);
  EXPECT_EQ(c.turns_equal, 4);
  EXPECT_EQ(c.TurnsDiffering(), 0);
  EXPECT_EQ(c.first_turns_compared, 2);
  EXPECT_EQ(c.first_turns_equal, 2);
  EXPECT_EQ(c.sessions_compared, 2);
  EXPECT_EQ(c.sessions_diverged, 0);
  EXPECT_EQ(c.turns_not_compared, 0);
  EXPECT_TRUE(c.differing.empty());
  EXPECT_EQ(AnswerCheckLine(c),
            "answers: 4 of 4 turns equal the cache-off server's (first turns 2 of 2); 0 of 2 sessions diverged");
}

// A first turn's prompt is the same on both servers, so its answer differing is the cache's
// fault; the session's later turns then run on other prompts and differ too.
TEST(CheckAnswersTest, FirstTurnDifferingCountsItsSessionOnceAndItsTurnsEach) {
  RunResult cached, recomputed;
  cached.turns = {Answered(0, 0, {1}), Answered(1, 0, {2, 3}), Answered(1, 1, {4}), Answered(1, 2, {5})};
  recomputed.turns = {Answered(0, 0, {1}), Answered(1, 0, {2, 4}), Answered(1, 1, {6}), Answered(1, 2, {5})};
  const AnswerCheck c = CheckAnswers(cached, recomputed);
  EXPECT_EQ(c.turns_compared, 4);
  EXPECT_EQ(c.turns_equal, 2) << "s1/3's answer equals, though its prompt differed";
  EXPECT_EQ(c.first_turns_compared, 2);
  EXPECT_EQ(c.first_turns_equal, 1);
  EXPECT_EQ(c.sessions_diverged, 1);
  EXPECT_EQ(c.DivergedAtFirstToken(), 0) << "s1/1 parts at its second token";
  EXPECT_EQ(c.MedianDivergenceToken(), 1);
  EXPECT_EQ(c.differing, (std::vector<std::string>{"s1/1", "s1/2"}));
  EXPECT_EQ(AnswerCheckLine(c),
            "answers: 2 of 4 turns equal the cache-off server's (first turns 1 of 2); 1 of 2 sessions diverged "
            "(at answer token 1 in the median, 0 at the first); differing: s1/1, s1/2");
}

// Where sessions part: at the first token (a wrong KV garbles it from there), or along the
// answer (a near-tie); only each session's first differing turn counts (its later prompts
// differ anyway), and a shorter answer that is a prefix of the other parts at its end.
TEST(CheckAnswersTest, CountsWhereEachDivergedSessionParts) {
  RunResult cached, recomputed;
  cached.turns = {Answered(0, 0, {1, 2, 3}), Answered(0, 1, {9}), Answered(1, 0, {4, 5, 6, 7}),
                  Answered(2, 0, {8, 8}), Answered(3, 0, {1})};
  recomputed.turns = {Answered(0, 0, {2, 2, 3}), Answered(0, 1, {1}), Answered(1, 0, {4, 5, 6, 0}),
                      Answered(2, 0, {8, 8, 8}), Answered(3, 0, {1})};
  const AnswerCheck c = CheckAnswers(cached, recomputed);
  EXPECT_EQ(c.sessions_diverged, 3);
  EXPECT_EQ(c.DivergedAtFirstToken(), 1);
  EXPECT_EQ(c.MedianDivergenceToken(), 2) << "parted at 0, 3 and 2";
  EXPECT_EQ(AnswerCheckToJson(c)["diverged_at_first_token"], 1);
}

TEST(CheckAnswersTest, FailedAndUnsentTurnsAreNeitherEqualNorDiffering) {
  RunResult cached, recomputed;
  // Session 0: turn 2 failed on the cached server (its answer, empty, is not compared).
  // Session 1: turn 2 failed on the cache-off server, so its turn 3 was not sent there.
  cached.turns = {Answered(0, 0, {1}), Failed(0, 1), Answered(1, 0, {2}), Answered(1, 1, {3}), Answered(1, 2, {4})};
  recomputed.turns = {Answered(0, 0, {1}), Answered(0, 1, {9}), Answered(1, 0, {2}), Failed(1, 1)};
  recomputed.not_sent_turns = 1;
  const AnswerCheck c = CheckAnswers(cached, recomputed);
  EXPECT_EQ(c.turns_compared, 2);
  EXPECT_EQ(c.turns_equal, 2);
  EXPECT_EQ(c.first_turns_equal, 2);
  EXPECT_EQ(c.sessions_diverged, 0);
  EXPECT_EQ(c.turns_not_compared, 3) << "s0/2 and s1/2 failed, s1/3 was not sent";
  EXPECT_EQ(AnswerCheckLine(c),
            "answers: 2 of 2 turns equal the cache-off server's (first turns 2 of 2); 0 of 2 sessions diverged; "
            "3 turns not compared (failed or not sent)");
}

TEST(CheckAnswersTest, ListsTheFirstTenDifferingTurnsAndCountsTheRest) {
  RunResult cached, recomputed;
  for (int s = 0; s < 12; ++s) {
    cached.turns.push_back(Answered(s, 0, {1}));
    recomputed.turns.push_back(Answered(s, 0, {2}));
  }
  const AnswerCheck c = CheckAnswers(cached, recomputed);
  EXPECT_EQ(c.TurnsDiffering(), 12);
  ASSERT_EQ(c.differing.size(), kMaxListedTurns);
  EXPECT_EQ(c.differing.front(), "s0/1");
  EXPECT_EQ(c.differing.back(), "s9/1");
  const std::string line = AnswerCheckLine(c);
  EXPECT_NE(line.find("differing: s0/1, s1/1, s2/1, s3/1, s4/1, s5/1, s6/1, s7/1, s8/1, s9/1 (+2 more)"),
            std::string::npos)
      << line;
  const nlohmann::json j = AnswerCheckToJson(c);
  EXPECT_EQ(j["turns_differing"], 12);
  EXPECT_EQ(j["sessions_diverged"], 12);
  EXPECT_EQ(j["differing"].size(), kMaxListedTurns);
}

TEST(AddAnswerCheckTest, SumsCountsAndPrefixesNamesUpToTheCap) {
  RunResult cached, recomputed;
  for (int s = 0; s < 6; ++s) {
    cached.turns.push_back(Answered(s, 0, {1}));
    recomputed.turns.push_back(Answered(s, 0, {s == 0 ? 1 : 2}));
  }
  const AnswerCheck part = CheckAnswers(cached, recomputed);  // s1/1 .. s5/1 differ
  AnswerCheck total;
  AddAnswerCheck(total, part, "h64n8c2");
  AddAnswerCheck(total, part, "h64n8c4");
  AddAnswerCheck(total, part, "h64n8c8");
  EXPECT_EQ(total.turns_compared, 18);
  EXPECT_EQ(total.turns_equal, 3);
  EXPECT_EQ(total.sessions_diverged, 15);
  ASSERT_EQ(total.differing.size(), kMaxListedTurns);
  EXPECT_EQ(total.differing.front(), "h64n8c2/s1/1");
  EXPECT_EQ(total.differing.back(), "h64n8c4/s5/1");
  EXPECT_NE(AnswerCheckLine(total).find("(+5 more)"), std::string::npos) << AnswerCheckLine(total);
}

}  // namespace
}  // namespace strata::server::bench
