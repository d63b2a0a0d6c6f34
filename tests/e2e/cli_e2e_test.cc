// The `strata` command line as a user meets it: --help lists the flags of every command,
// `strata <command> --help` those of one, --version names the version and the commit, a
// bad command or model name is refused with a message.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace strata::testing {
namespace {

struct CommandRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandRun RunStrata(const std::string& args) {
  CommandRun run;
  const std::string command = std::string(STRATA_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer;
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(CliE2eTest, HelpListsEveryCommandAndItsFlags) {
  const CommandRun run = RunStrata("--help");
  EXPECT_FALSE(absl::StrContains(run.output, "No flags matched")) << run.output;
  for (const char* command : {"serve", "chat", "bench", "logits"}) {
    EXPECT_TRUE(absl::StrContains(run.output, command)) << "--help does not name " << command << ":\n" << run.output;
  }
  for (const char* flag : {"--host_cache_bytes", "--ssd_dirs", "--session", "--sweep", "--tokens", "--model"}) {
    EXPECT_TRUE(absl::StrContains(run.output, flag)) << "--help does not list " << flag << ":\n" << run.output;
  }
}

TEST(CliE2eTest, CommandHelpListsOnlyThatCommandsFlags) {
  const CommandRun serve = RunStrata("serve --help");
  EXPECT_TRUE(absl::StrContains(serve.output, "--host_cache_bytes")) << serve.output;
  EXPECT_TRUE(absl::StrContains(serve.output, "--model")) << "serve --help misses a shared flag:\n" << serve.output;
  EXPECT_FALSE(absl::StrContains(serve.output, "--sweep")) << "serve --help lists bench's flags:\n" << serve.output;
  const CommandRun bench = RunStrata("bench --help");
  EXPECT_TRUE(absl::StrContains(bench.output, "--sweep")) << bench.output;
  EXPECT_TRUE(absl::StrContains(bench.output, "--target")) << bench.output;
  EXPECT_FALSE(absl::StrContains(bench.output, "--host_cache_bytes")) << "bench --help lists serve's flags";
}

TEST(CliE2eTest, VersionNamesTheVersionAndTheCommit) {
  const CommandRun run = RunStrata("--version");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_TRUE(absl::StartsWith(run.output, "strata ")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "commit ")) << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "Debug build")) << run.output;
  if (std::filesystem::exists(std::string(STRATA_SOURCE_DIR) + "/.git")) {
    EXPECT_FALSE(absl::StrContains(run.output, "commit unknown")) << "built from git, the commit should be known";
  }
}

TEST(CliE2eTest, UnknownCommandIsRefusedWithTheCommandList) {
  const CommandRun run = RunStrata("frobnicate");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(run.output, "serve")) << run.output;
}

TEST(CliE2eTest, UnknownRandomModelNameIsRefusedAtStart) {
  const CommandRun run = RunStrata("serve --port=0 --metrics_port=-1 --model=random:llama9-400b");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "unknown model shape 'llama9-400b'")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "llama3-8b")) << "the message should name the known shapes:\n"
                                                          << run.output;
}

}  // namespace
}  // namespace strata::testing
