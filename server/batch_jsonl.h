// The JSONL files of `strata batch`: one prompt a line in, one result a line out.
//
// In:  {"id": "q1", "messages": [{"role": "user", "content": "..."}]} or
//      {"id": "q1", "token_ids": [1, 2, 3]}, optionally "max_new_tokens", "stop" and the
//      sampling ("temperature", "top_p", "seed", or the same inside "sampling").
// Out: {"id": "q1", "line": 1, "text": "...", "token_ids": [...], "usage": {...},
//       "finish_reason": "stop"} or {"id": "q1", "line": 1, "error": {"code":
//       "INVALID_ARGUMENT", "message": "..."}}.
#ifndef STRATA_SERVER_BATCH_JSONL_H_
#define STRATA_SERVER_BATCH_JSONL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "strata/v1/batch.pb.h"

namespace strata::server {

// The prompt a line holds. InvalidArgument, saying what is wrong, for a line that is not a
// JSON object of the form above (unknown keys included). `*id` gets the line's id when
// it has one, even on error.
absl::StatusOr<v1::BatchPrompt> ParseBatchLine(std::string_view line, std::string* id);

// A result as its output line (no newline). `line` is the prompt's line in the input.
std::string ResultLine(const v1::BatchResult& result, int line);
// A prompt that never reached the server (a malformed line).
std::string ErrorLine(const std::string& id, int line, const absl::Status& status);

}  // namespace strata::server

#endif  // STRATA_SERVER_BATCH_JSONL_H_
