// The cache's promise checked from the client: the answer with the cache equals the
// answer without. `strata bench --compare=cache_off` runs one workload against the cached
// server and a --cache=off server; the bench sends no sampling parameters (greedy
// decoding), so each turn's answer is a function of its prompt and must be the same
// tokens from both.
//
// A later turn's prompt holds the session's earlier answers, so once a session's answer
// differs its later turns run on other prompts and differ too: a turn counts as equal only
// when its answer is, and the sessions that diverged at all are counted apart.
//
// All functions are pure and thread-safe; none throws.
#ifndef STRATA_SERVER_BENCH_ANSWER_CHECK_H_
#define STRATA_SERVER_BENCH_ANSWER_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/bench/runner.h"

namespace strata::server::bench {

// Differing turns named in an AnswerCheck (the counts cover them all).
inline constexpr size_t kMaxListedTurns = 10;

struct AnswerCheck {
  int64_t turns_compared = 0;        // (session, turn)s that succeeded in both runs
  int64_t turns_equal = 0;           // of those, with the same answer tokens
  int64_t first_turns_compared = 0;  // the same over each session's first turn only
  int64_t first_turns_equal = 0;
  int64_t sessions_compared = 0;  // sessions with a turn compared
  int64_t sessions_diverged = 0;  // of those, with a turn whose answer differs
  // Where each diverged session's first differing answer parts from the cache-off one (the
  // answer token), in session order. A bf16 near-tie tips somewhere along an answer; a
  // wrong KV block garbles it from the first token.
  std::vector<int64_t> divergence_tokens;
  // Turns of the workload that failed or were not sent in either run (neither equal nor
  // differing).
  int64_t turns_not_compared = 0;
  // The first kMaxListedTurns differing turns, in session and turn order, as "s<session
  // index>/<turn number from 1>" ("s3/1": session 3's first turn), behind a prefix when
  // added up over several checks (AddAnswerCheck).
  std::vector<std::string> differing;

  int64_t TurnsDiffering() const { return turns_compared - turns_equal; }
  // Diverged sessions that part at their answer's first token.
  int64_t DivergedAtFirstToken() const;
  // The median of divergence_tokens; -1 when none diverged.
  int64_t MedianDivergenceToken() const;
};

// Compares the answers of two runs of one workload, turn by turn. The workload's turns
// are those of either run (records plus not_sent_turns).
AnswerCheck CheckAnswers(const RunResult& cached, const RunResult& recomputed);

// Adds `part`'s counts to `total`, and its differing turns as "<prefix>/s3/1" while fewer
// than kMaxListedTurns are listed.
void AddAnswerCheck(AnswerCheck& total, const AnswerCheck& part, const std::string& prefix);

// The report's line (no newline): "answers: 127 of 128 turns equal the cache-off server's
// (first turns 64 of 64); 1 of 64 sessions diverged (at answer token 7 in the median, 0 at
// the first); differing: s3/2", then "(+N more)"
// past the list and "; N turns not compared (failed or not sent)" when there are any.
std::string AnswerCheckLine(const AnswerCheck& check);

nlohmann::json AnswerCheckToJson(const AnswerCheck& check);

}  // namespace strata::server::bench

#endif  // STRATA_SERVER_BENCH_ANSWER_CHECK_H_
