// `strata chat`: a scripted multi-turn chat against a running server, or an interactive one.
#include <cstdio>

#include "absl/flags/flag.h"
#include "server/chat_client.h"
#include "server/cli/commands.h"
#include "server/cli/shared_flags.h"

ABSL_FLAG(std::string, session, "demo", "chat: session ID");
ABSL_FLAG(int, max_new_tokens, 160, "chat: the most tokens to generate per turn");
ABSL_FLAG(float, temperature, 0.7f, "chat: sampling temperature (0: greedy)");
ABSL_FLAG(float, top_p, 0.9f, "chat: nucleus sampling's probability mass");
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
  o.temperature = absl::GetFlag(FLAGS_temperature);
  o.top_p = absl::GetFlag(FLAGS_top_p);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (absl::GetFlag(FLAGS_interactive)) return RunInteractiveChat(o, stdin, stdout);
  o.user_turns = {
      "Hello! Who are you?",
      "Tell me about Moses.",
      "What should I pack for a long journey?",
  };
  return RunChatScript(o);
}

}  // namespace strata::server::cli
