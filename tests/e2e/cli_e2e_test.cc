// The `strata` command line as a user meets it: --help lists the flags of every
// command, `strata <command> --help` those of one, --version names the version
// and the commit, a bad command or model name is refused with a message;
// `strata ppl` scores a text; the scripted `strata chat` against the built-in
// model reads as English; --cpu_idle_poll_threads runs its spinners at idle priority.
#include <sched.h>
#include <sys/wait.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/e2e/server_process.h"

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
  for (const char* command : {"serve", "chat", "bench", "logits", "ppl"}) {
    EXPECT_TRUE(absl::StrContains(run.output, command)) << "--help does not name " << command << ":\n" << run.output;
  }
  for (const char* flag :
       {"--host_cache_bytes", "--ssd_dirs", "--session", "--sweep", "--tokens", "--model", "--text"}) {
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

// --cuda_decode_kernel takes auto, cuda or tensor; anything else is refused before the
// server starts, naming the values.
TEST(CliE2eTest, BadDecodeKernelIsRefusedAtStart) {
  const CommandRun run = RunStrata("serve --port=0 --metrics_port=-1 --cuda_decode_kernel=fast");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "expected auto, cuda or tensor")) << run.output;
  const CommandRun help = RunStrata("serve --help");
  EXPECT_TRUE(absl::StrContains(help.output, "--cuda_decode_kernel")) << help.output;
  EXPECT_TRUE(absl::StrContains(help.output, "default: auto")) << help.output;
}

// --cpu_idle_poll_threads: the server runs that many SCHED_IDLE threads beside its own
// and answers; a count out of range is refused before anything starts.
TEST(CliE2eTest, CpuIdlePollersRunAtIdlePriorityAndABadCountIsRefused) {
  const CommandRun bad = RunStrata("serve --port=0 --metrics_port=-1 --cpu_idle_poll_threads=-3");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(absl::StrContains(bad.output, "--cpu_idle_poll_threads")) << bad.output;

  auto server = ServerProcess::Start({"--cpu_idle_poll_threads=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  int idle = 0, threads = 0;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", (*server)->pid(), "/task"))) {
    int tid = 0;
    if (!absl::SimpleAtoi(task.path().filename().string(), &tid)) continue;
    ++threads;
    if (sched_getscheduler(tid) == SCHED_IDLE) ++idle;
  }
  EXPECT_EQ(idle, 1) << "of " << threads << " threads";
  const CommandRun chat = RunStrata(absl::StrCat("chat --target=", (*server)->target(), " --session=pollers"));
  EXPECT_EQ(chat.exit_code, 0) << chat.output;
}

// --stream_wake_threads: out of [0, 64] is refused before anything starts; 0 (the engine
// wakes the calls itself) serves a chat as the default does.
TEST(CliE2eTest, StreamWakeThreadsOutOfRangeAreRefusedAndZeroServes) {
  for (const char* bad : {"-1", "65"}) {
    const CommandRun run = RunStrata(absl::StrCat("serve --port=0 --metrics_port=-1 --stream_wake_threads=", bad));
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, "--stream_wake_threads must be in [0, 64]")) << run.output;
  }
  auto server = ServerProcess::Start({"--stream_wake_threads=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const CommandRun chat = RunStrata(absl::StrCat("chat --target=", (*server)->target(), " --session=inline-wakes"));
  EXPECT_EQ(chat.exit_code, 0) << chat.output;
}

TEST(CliE2eTest, TooFewRpcThreadsAreRefusedAtStart) {
  const CommandRun run = RunStrata("serve --port=0 --metrics_port=-1 --max_rpc_threads=2");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--max_rpc_threads must be at least 4")) << run.output;
}

// The number after `label` at the start of a line of `output`, or -1.
double Figure(const std::string& output, absl::string_view label) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::ConsumePrefix(&line, label)) continue;
    double v = 0;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(0, line.find(' ', line.find_first_not_of(' ')))), &v)) {
      return v;
    }
  }
  return -1;
}

// The first bytes of the held-out text of the built-in model's training, in a
// file.
std::string HeldOutSample(size_t bytes) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/model/builtin/held_out.txt");
  std::string text(bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(bytes));
  const std::string path = ::testing::TempDir() + "/held_out_sample.txt";
  std::ofstream(path) << text.substr(0, static_cast<size_t>(in.gcount()));
  return path;
}

TEST(CliE2eTest, PplScoresATextAndTheBuiltInModelKnowsEnglish) {
  const std::string text = HeldOutSample(1500);
  const std::string args = absl::StrCat("ppl --device=cpu --window=256 --stride=128 --text=", text);
  const CommandRun trained = RunStrata(args);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(absl::StrContains(trained.output, "1500 bytes, 1500 tokens scored")) << trained.output;
  const double trained_bpb = Figure(trained.output, "bits/byte");
  const CommandRun random = RunStrata(args + " --model=random:builtin");
  ASSERT_EQ(random.exit_code, 0) << random.output;
  const double random_bpb = Figure(random.output, "bits/byte");
  EXPECT_GT(trained_bpb, 0.5) << trained.output;
  EXPECT_LT(trained_bpb, 2.2) << "the trained built-in model should know KJV English:\n" << trained.output;
  EXPECT_GT(random_bpb, 6.0) << random.output;
  EXPECT_NEAR(Figure(trained.output, "perplexity"), std::exp(Figure(trained.output, "nll")), 1e-3);
}

TEST(CliE2eTest, PplRefusesBadInputWithAMessage) {
  const CommandRun no_text = RunStrata("ppl --device=cpu");
  EXPECT_EQ(no_text.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(no_text.output, "--text")) << no_text.output;
  const CommandRun missing = RunStrata("ppl --device=cpu --text=/nonexistent/file.txt");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(missing.output, "cannot read /nonexistent/file.txt")) << missing.output;
  const CommandRun window =
      RunStrata(absl::StrCat("ppl --device=cpu --window=8 --stride=9 --text=", HeldOutSample(100)));
  EXPECT_EQ(window.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(window.output, "stride <= window")) << window.output;
}

// The answers of `strata chat`'s script (the text after each "strata> ").
std::vector<std::string> Answers(const std::string& output) {
  std::vector<std::string> answers;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::ConsumePrefix(&line, "strata> ")) answers.emplace_back(line);
  }
  return answers;
}

TEST(CliE2eTest, TheBuiltInModelAnswersTheScriptedChatInEnglishAndReusesTheCache) {
  auto server = ServerProcess::Start({"--model=", "--device=cpu"});  // the trained built-in model
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string chat = absl::StrCat("chat --target=", (*server)->target());
  const CommandRun first = RunStrata(chat + " --session=a");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::vector<std::string> answers = Answers(first.output);
  ASSERT_EQ(answers.size(), 3u) << first.output;
  const std::set<std::string> common = {"the", "and",  "of",    "unto", "he", "that", "to",  "in",   "I",  "his",
                                        "for", "they", "shall", "a",    "is", "not",  "him", "said", "be", "LORD"};
  for (const std::string& a : answers) {
    size_t letters = 0, plain = 0, known = 0, words = 0;
    for (unsigned char c : a) {
      letters += std::isalpha(c) ? 1 : 0;
      plain += (std::isalpha(c) || std::strchr(" ,.;:'!?-()", c) != nullptr) ? 1 : 0;
    }
    for (absl::string_view w : absl::StrSplit(a, absl::ByAnyChar(" ,.;:!?()"), absl::SkipEmpty())) {
      ++words;
      known += common.count(std::string(w));
    }
    EXPECT_GT(a.size(), 40u) << a;
    EXPECT_GE(plain, a.size() * 97 / 100) << "not plain English text: " << a;
    EXPECT_GE(letters, a.size() * 7 / 10) << a;
    EXPECT_GE(known * 5, words) << "a fifth of English words are among the commonest twenty: " << a;
  }
  EXPECT_TRUE(absl::StrContains(first.output, "0 reused")) << "turn 1 is a miss:\n" << first.output;
  size_t reused_turns = 0;
  for (size_t at = first.output.find("tier hbm"); at != std::string::npos; at = first.output.find("tier hbm", at + 1)) {
    ++reused_turns;
  }
  EXPECT_EQ(reused_turns, 2u) << "turns 2 and 3 reuse the session's KV in HBM:\n" << first.output;
  // The same seed and conversation give the same answers in another session.
  const CommandRun again = RunStrata(chat + " --session=b");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(Answers(again.output), answers);
}

}  // namespace
}  // namespace strata::testing
