#include "server/bench/answer_check.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace strata::server::bench {
namespace {

using TurnKey = std::pair<int, int>;  // (session, turn)

// The successful turns of `run`, in session and turn order.
std::map<TurnKey, const TurnRecord*> AnsweredTurns(const RunResult& run) {
  std::map<TurnKey, const TurnRecord*> out;
  for (const TurnRecord& r : run.turns) {
    if (r.status_code == 0) out[{r.session, r.turn}] = &r;
  }
  return out;
}

// The first answer token at which a and b differ (the shorter's length when it is a prefix
// of the other).
int64_t FirstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return ia - a.begin();
}

int64_t WorkloadTurns(const RunResult& run) { return static_cast<int64_t>(run.turns.size()) + run.not_sent_turns; }

}  // namespace

int64_t AnswerCheck::DivergedAtFirstToken() const {
  return std::count(divergence_tokens.begin(), divergence_tokens.end(), 0);
}

int64_t AnswerCheck::MedianDivergenceToken() const {
  if (divergence_tokens.empty()) return -1;
  std::vector<int64_t> sorted = divergence_tokens;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  return sorted[sorted.size() / 2];
}

AnswerCheck CheckAnswers(const RunResult& cached, const RunResult& recomputed) {
  const std::map<TurnKey, const TurnRecord*> a = AnsweredTurns(cached);
  const std::map<TurnKey, const TurnRecord*> b = AnsweredTurns(recomputed);
  AnswerCheck check;
  int last_session = -1;
  bool last_diverged = false;
  for (const auto& [key, record] : a) {
    const auto it = b.find(key);
    if (it == b.end()) continue;
    const auto [session, turn] = key;
    if (session != last_session) {
      ++check.sessions_compared;
      last_session = session;
      last_diverged = false;
    }
    const bool equal = record->answer_tokens == it->second->answer_tokens;
    ++check.turns_compared;
    check.turns_equal += equal;
    if (turn == 0) {
      ++check.first_turns_compared;
      check.first_turns_equal += equal;
    }
    if (equal) continue;
    if (!last_diverged) {
      ++check.sessions_diverged;
      check.divergence_tokens.push_back(FirstDifference(record->answer_tokens, it->second->answer_tokens));
    }
    last_diverged = true;
    if (check.differing.size() < kMaxListedTurns) check.differing.push_back(absl::StrCat("s", session, "/", turn + 1));
  }
  check.turns_not_compared = std::max(WorkloadTurns(cached), WorkloadTurns(recomputed)) - check.turns_compared;
  return check;
}

void AddAnswerCheck(AnswerCheck& total, const AnswerCheck& part, const std::string& prefix) {
  total.turns_compared += part.turns_compared;
  total.turns_equal += part.turns_equal;
  total.first_turns_compared += part.first_turns_compared;
  total.first_turns_equal += part.first_turns_equal;
  total.sessions_compared += part.sessions_compared;
  total.sessions_diverged += part.sessions_diverged;
  total.divergence_tokens.insert(total.divergence_tokens.end(), part.divergence_tokens.begin(),
                                 part.divergence_tokens.end());
  total.turns_not_compared += part.turns_not_compared;
  for (const std::string& name : part.differing) {
    if (total.differing.size() == kMaxListedTurns) break;
    total.differing.push_back(absl::StrCat(prefix, "/", name));
  }
}

std::string AnswerCheckLine(const AnswerCheck& c) {
  std::string line = absl::StrFormat(
      "answers: %d of %d turns equal the cache-off server's (first turns %d of %d); %d of %d sessions diverged",
      c.turns_equal, c.turns_compared, c.first_turns_equal, c.first_turns_compared, c.sessions_diverged,
      c.sessions_compared);
  if (c.sessions_diverged > 0) {
    absl::StrAppend(&line, " (at answer token ", c.MedianDivergenceToken(), " in the median, ",
                    c.DivergedAtFirstToken(), " at the first)");
  }
  if (!c.differing.empty()) {
    absl::StrAppend(&line, "; differing: ", absl::StrJoin(c.differing, ", "));
    const int64_t unlisted = c.TurnsDiffering() - static_cast<int64_t>(c.differing.size());
    if (unlisted > 0) absl::StrAppend(&line, " (+", unlisted, " more)");
  }
  if (c.turns_not_compared > 0) {
    absl::StrAppend(&line, "; ", c.turns_not_compared, " turns not compared (failed or not sent)");
  }
  return line;
}

nlohmann::json AnswerCheckToJson(const AnswerCheck& c) {
  return {{"turns_compared", c.turns_compared},
          {"turns_equal", c.turns_equal},
          {"turns_differing", c.TurnsDiffering()},
          {"first_turns_compared", c.first_turns_compared},
          {"first_turns_equal", c.first_turns_equal},
          {"sessions_compared", c.sessions_compared},
          {"sessions_diverged", c.sessions_diverged},
          {"diverged_at_first_token", c.DivergedAtFirstToken()},
          {"median_divergence_token", c.MedianDivergenceToken()},
          {"turns_not_compared", c.turns_not_compared},
          {"differing", c.differing}};
}

}  // namespace strata::server::bench
