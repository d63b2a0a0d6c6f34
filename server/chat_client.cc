#include "server/chat_client.h"

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "strata/client/session.h"
#include "strata/v1/chat.pb.h"

namespace strata::server {
namespace {

const char* TierLabel(v1::Tier tier) {
  switch (tier) {
    case v1::TIER_HBM: return "hbm";
    case v1::TIER_HOST: return "host";
    case v1::TIER_SSD: return "ssd";
    default: return "none (miss)";
  }
}

// The CLI's session: calls fail at once when the server is not there (no
// waiting for it, no retries), with the deadline of a long answer.
absl::StatusOr<std::unique_ptr<client::Session>> NewSession(const ChatScriptOptions& options) {
  client::SessionOptions o;
  o.target = options.target;
  o.session_id = options.session_id;
  o.api_key = options.api_key;
  o.max_new_tokens = static_cast<uint32_t>(options.max_new_tokens);
  o.sampling.set_temperature(options.temperature);
  o.sampling.set_top_p(options.top_p);
  o.sampling.set_seed(options.seed);
  o.retries = 0;
  o.wait_for_ready = false;
  o.timeout = absl::Minutes(5);
  return client::Session::Create(std::move(o));
}

void PrintError(size_t turn, const absl::Status& status) {
  std::fprintf(stderr, "turn %zu failed: %s: %s\n", turn,
               absl::StrFormat("code %d", static_cast<int>(status.code())).c_str(),
               std::string(status.message()).c_str());
}

void PrintTurnStatus(std::FILE* out, size_t turn, const v1::ChatDone& done) {
  const v1::Usage& u = done.usage();
  std::fprintf(out, "\n  [turn %zu: TTFT %.1f ms; %u prompt tokens, %u reused, %u computed; tier %s]\n", turn,
               done.ttft_ms(), u.prompt_tokens(), u.cached_tokens(), u.computed_tokens(), TierLabel(done.cache_tier()));
}

// Streams text to `out` as it arrives.
auto StreamTo(std::FILE* out) {
  return [out](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
  };
}

}  // namespace

int RunChatScript(const ChatScriptOptions& options) {
  auto session = NewSession(options);
  if (!session.ok()) {
    std::fprintf(stderr, "strata chat: %s\n", std::string(session.status().message()).c_str());
    return 1;
  }
  for (size_t turn = 0; turn < options.user_turns.size(); ++turn) {
    std::printf("you> %s\nstrata> ", options.user_turns[turn].c_str());
    std::fflush(stdout);
    const absl::StatusOr<client::Turn> t = (*session)->Send(options.user_turns[turn], StreamTo(stdout));
    if (!t.ok()) {
      std::printf("\n");
      PrintError(turn + 1, t.status());
      return 1;
    }
    PrintTurnStatus(stdout, turn + 1, t->done);
  }
  return 0;
}

int RunInteractiveChat(const ChatScriptOptions& options, std::FILE* in, std::FILE* out) {
  auto session = NewSession(options);
  if (!session.ok()) {
    std::fprintf(stderr, "strata chat: %s\n", std::string(session.status().message()).c_str());
    return 1;
  }
  std::fprintf(out, "session '%s' on %s; type a message, /quit to leave\n", options.session_id.c_str(),
               options.target.c_str());
  size_t turn = 0;
  char buffer[8192];
  for (;;) {
    std::fprintf(out, "you> ");
    std::fflush(out);
    if (std::fgets(buffer, sizeof(buffer), in) == nullptr) break;
    const std::string line(absl::StripAsciiWhitespace(buffer));
    if (line.empty()) continue;
    if (line == "/quit") break;
    std::fprintf(out, "strata> ");
    const absl::StatusOr<client::Turn> t = (*session)->Send(line, StreamTo(out));
    ++turn;
    if (!t.ok()) {  // the session leaves a failed turn out of the conversation
      std::fprintf(out, "\n");
      PrintError(turn, t.status());
      continue;
    }
    PrintTurnStatus(out, turn, t->done);
  }
  std::fprintf(out, "\n");
  return 0;
}

}  // namespace strata::server
