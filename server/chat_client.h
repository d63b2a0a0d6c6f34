// The `strata chat` command: a scripted multi-turn chat against a running server that
// prints, per turn, what the session cache did.
#ifndef STRATA_SERVER_CHAT_CLIENT_H_
#define STRATA_SERVER_CHAT_CLIENT_H_

#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::server {

struct ChatScriptOptions {
  std::string target = "127.0.0.1:7070";
  std::string session_id = "demo";
  std::string api_key;  // sent as `authorization: Bearer` when non-empty
  std::vector<std::string> user_turns;
  int max_new_tokens = 48;
  // Sampling of every turn (ChatRequest.sampling): temperature 0 is greedy.
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

// Runs the turns in order, carrying the conversation (with the answers) from turn to
// turn, printing each message and its streamed answer and then a status line (TTFT,
// tokens reused and computed, the tier that served the history). Returns 0 on success,
// 1 if any call failed (the error is printed).
int RunChatScript(const ChatScriptOptions& options);

// Interactive: reads a message a line from `in` (until EOF or "/quit"), streams each
// answer to `out` as it arrives, then a status line (TTFT, tokens reused and computed,
// the tier that served the history). A failed turn is reported and left out of the
// conversation. user_turns is not used. Returns 0.
int RunInteractiveChat(const ChatScriptOptions& options, std::FILE* in, std::FILE* out);

}  // namespace strata::server

#endif  // STRATA_SERVER_CHAT_CLIENT_H_
