// Small gRPC helpers for end-to-end tests: one streamed Chat turn, collected, and
// GetSession. Each call opens its own channel to `target` (host:port).
#ifndef STRATA_TESTS_E2E_CHAT_RPC_H_
#define STRATA_TESTS_E2E_CHAT_RPC_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"

namespace strata::testing {

struct ChatTurn {
  grpc::Status status;
  std::vector<int32_t> tokens;  // every delta's token ids, in order
  std::string text;             // every delta's text
  v1::ChatDone done;            // the final event (empty if none came)
};

// A request for `session` of these (role, content) messages and `max_new` tokens.
v1::ChatRequest MessagesRequest(const std::string& session,
                                const std::vector<std::pair<std::string, std::string>>& messages, int max_new = 16);

// Sends `request` (with `api_key` as its bearer token, if not empty) and reads the stream
// to its end (deadline two minutes).
ChatTurn RunChat(const std::string& target, const v1::ChatRequest& request, const std::string& api_key = "");

// GetSession, with the gRPC status turned into an absl::Status of the same code.
absl::StatusOr<v1::SessionInfo> GetSessionInfo(const std::string& target, const std::string& session_id);

}  // namespace strata::testing

#endif  // STRATA_TESTS_E2E_CHAT_RPC_H_
