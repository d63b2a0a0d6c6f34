// strata: hierarchical KV-cache store with a co-located LLM inference engine.
//
//   strata serve  [flags]   serve the gRPC API (and /metrics)
//   strata chat   [flags]   a scripted multi-turn chat against a running server
//   strata bench  [flags]   a multi-turn serving benchmark (cache on vs off, rates, traces)
//   strata logits [flags]   a model's logits as JSON, for checks against a reference
//   strata ppl    [flags]   perplexity and bits per byte of a text file under a model
//   strata batch  [flags]   a JSONL file of prompts through a running server as one batch
//
// `strata --help` lists every command's flags; `strata <command> --help` only that
// command's; `--version` prints the version and the git commit.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/bench/bench_command.h"
#include "server/cli/commands.h"
#include "server/cli/version.h"

namespace {

struct Command {
  const char* name;
  int (*run)();
  const char* summary;
  // Files whose flags the command reads (matched as path suffixes).
  std::vector<absl::string_view> flag_files;
};

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"serve", strata::server::cli::ServeCommand, "serve the gRPC API and /metrics",
       {"server/cli/serve_command.cc", "server/cli/shared_flags.cc"}},
      {"chat", strata::server::cli::ChatCommand, "a scripted three-turn chat against a running server",
       {"server/cli/chat_command.cc", "server/cli/shared_flags.cc"}},
      {"bench", strata::server::bench::RunBenchCommand,
       "a multi-turn serving benchmark: TTFT, latency, throughput, cache reuse; cache on vs off",
       {"server/bench/bench_config.cc", "server/cli/shared_flags.cc"}},
      {"logits", strata::server::cli::LogitsCommand, "a model's logits for token sequences, as JSON",
       {"server/cli/logits_command.cc", "server/cli/shared_flags.cc"}},
      {"batch", strata::server::cli::BatchCommand,
       "a JSONL file of prompts through a running server as one batch (shared prefixes planned globally)",
       {"server/cli/batch_command.cc", "server/cli/shared_flags.cc"}},
      {"ppl", strata::server::cli::PplCommand, "perplexity and bits per byte of a text file (sliding window)",
       {"server/cli/ppl_command.cc", "server/cli/shared_flags.cc"}},
  };
  return commands;
}

const Command* FindCommand(std::string_view name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// The command named on the command line (the first argument that is not a flag), before
// the flags are parsed, so that `strata <command> --help` can list that command's flags.
const Command* CommandInArgs(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') return FindCommand(argv[i]);
    if (std::strcmp(argv[i], "--") == 0) break;
  }
  return nullptr;
}

std::string Usage() {
  std::string usage = "strata <command> [flags]; commands:\n";
  for (const Command& c : Commands()) absl::StrAppend(&usage, absl::StrFormat("  %-7s %s\n", c.name, c.summary));
  absl::StrAppend(&usage, "`strata <command> --help` lists the flags of one command; --helpfull every flag.");
  return usage;
}

void ConfigureUsage(const Command* command) {
  static const Command* chosen = nullptr;
  chosen = command;
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    for (const Command& c : Commands()) {
      if (chosen != nullptr && chosen != &c) continue;
      for (absl::string_view f : c.flag_files) {
        if (absl::EndsWith(file, f)) return true;
      }
    }
    return false;
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [] {
    return absl::StrCat("strata ", strata::server::cli::Version(), " (commit ", strata::server::cli::GitCommit(),
                        "; ", strata::server::cli::BuildFlavor(), ")\n");
  };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace

int main(int argc, char** argv) {
  // Block the shutdown signals in every thread; `serve` waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);  // serve reloads its API keys on it
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ConfigureUsage(CommandInArgs(argc, argv));
  absl::SetProgramUsageMessage(Usage());
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const Command* command = args.size() > 1 ? FindCommand(args[1]) : nullptr;
  if (command == nullptr) {
    std::fprintf(stderr, "%s\n", Usage().c_str());
    return 2;
  }
  return command->run();
}
