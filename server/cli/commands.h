// The `strata` commands. Each runs with the command line already parsed (flags in
// absl::GetFlag) and returns the process exit code: 0 success, 1 failure, 2 bad usage.
// Each is defined in its own <command>_command.cc with the flags only it reads.
#ifndef STRATA_SERVER_CLI_COMMANDS_H_
#define STRATA_SERVER_CLI_COMMANDS_H_

namespace strata::server::cli {

// Serves the gRPC API and /metrics until SIGINT or SIGTERM (which must be blocked in
// every thread before the call: the command waits for them).
int ServeCommand();
// A scripted three-turn chat against a running server, printing what the cache did.
int ChatCommand();
// The model's logits for --tokens as JSON (tests/gpu/check_hf_logits.py reads them).
int LogitsCommand();
// Perplexity and bits per byte of --text under the model (model/perplexity.h).
int PplCommand();
// A JSONL file of prompts through a running server's BatchService; exit code 3 when some
// prompts failed (their lines say why).
int BatchCommand();

}  // namespace strata::server::cli

#endif  // STRATA_SERVER_CLI_COMMANDS_H_
