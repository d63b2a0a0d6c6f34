// `strata chat`: a scripted multi-turn chat against a running server, or an interactive one.
#include <cstdio>

#include "absl/flags/flag.h"
#include "server/chat_client.h"
#include "server/cli/commands.h"
#include "server/cli/shared_flags.h"

ABSL_FLAG(std::string, session, "demo", "chat: session ID");
ABSL_FLAG(int, max_new_tokens, 48, "chat: tokens to generate per turn");
ABSL_FLAG(bool, interactive, false,
          "chat: read messages from the terminal, stream each answer, and show what the cache did "
          "(/quit to leave); without it, a scripted three-turn chat");

namespace strata::server::cli {

int ChatCommand() {
  ChatScriptOptions o;
  o.target = TargetFromFlags();
  o.session_id = absl::GetFlag(FLAGS_session);
  o.api_key = absl::GetFlag(FLAGS_api_key);
  o.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  if (absl::GetFlag(FLAGS_interactive)) return RunInteractiveChat(o, stdin, stdout);
  o.user_turns = {
      "Hello! I am planning a week of hiking in the Alps in September. What should I pack?",
      "Good. Which huts would you book near Zermatt, and how early?",
      "Thanks. Summarise the whole plan in three short bullet points.",
  };
  return RunChatScript(o);
}

}  // namespace strata::server::cli
