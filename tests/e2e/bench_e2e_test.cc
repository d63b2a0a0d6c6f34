// End-to-end: the real `strata bench` binary against a real `strata serve` on the built-in
// CPU model. What bench reports must equal what the server's /metrics counted.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/http_get.h"
#include "base/prometheus_text.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;

// Small prompts and answers: the CPU model is slow, and the host tier reuses 16-token chunks.
const std::vector<std::string> kServeFlags = {"--pin_host_memory=false", "--chunk_tokens=16"};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A `strata bench` child process with its stdout and stderr in files.
class BenchProcess {
 public:
  explicit BenchProcess(std::vector<std::string> flags) {
    char tmpl[] = "/tmp/strata-bench-e2e-XXXXXX";
    dir_ = mkdtemp(tmpl) ? tmpl : "/tmp";
    std::vector<std::string> args = {STRATA_BINARY, "bench"};
    args.insert(args.end(), flags.begin(), flags.end());
    pid_ = fork();
    if (pid_ == 0) {
      if (!freopen((dir_ + "/stdout").c_str(), "w", stdout) || !freopen((dir_ + "/stderr").c_str(), "w", stderr)) {
        _exit(126);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~BenchProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_; }
  // Waits up to `timeout`; the exit code, or -1 (the child killed) on timeout or a signal.
  int Wait(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Stdout() const { return ReadFile(dir_ + "/stdout"); }
  std::string Stderr() const { return ReadFile(dir_ + "/stderr"); }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

std::map<std::string, double> Scrape(const ServerProcess& server) {
  auto body = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  if (!body.ok()) return {};
  auto samples = metrics::ParsePrometheusText(*body);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::map<std::string, double>{};
}

double Moved(const std::map<std::string, double>& before, const std::map<std::string, double>& after,
             const std::string& key) {
  auto get = [&](const std::map<std::string, double>& m) {
    auto it = m.find(key);
    return it == m.end() ? 0.0 : it->second;
  };
  return get(after) - get(before);
}

nlohmann::json ReadJson(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(path), nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "bench wrote no valid JSON to " << path;
  return j;
}

// A synthetic run (6 sessions unless `flags` say otherwise) against `server`, with its
// /metrics scraped before and after; `run` is the report's one run (null if the bench
// failed or wrote none, which is reported).
struct MeasuredRun {
  std::map<std::string, double> before, after;
  nlohmann::json run;
  std::string stdout_text;
};
MeasuredRun RunSynthetic(const ServerProcess& server, const std::vector<std::string>& flags) {
  const std::string json_path = "/tmp/strata-bench-e2e-report-" + std::to_string(getpid()) + ".json";
  MeasuredRun m;
  m.before = Scrape(server);
  std::vector<std::string> args = {"--target=" + server.target(),
                                   absl::StrCat("--metrics_target=127.0.0.1:", server.metrics_port()),
                                   "--rate=20", "--turns=3", "--prompt_tokens=24", "--output_tokens=6",
                                   "--think_s=0.1", "--json=" + json_path};
  args.insert(args.end(), flags.begin(), flags.end());
  BenchProcess bench(args);
  const int code = bench.Wait();
  EXPECT_EQ(code, 0) << "bench failed; stderr:\n" << bench.Stderr() << "\nstdout:\n" << bench.Stdout();
  m.after = Scrape(server);
  m.stdout_text = bench.Stdout();
  if (code != 0) return m;
  const nlohmann::json report = ReadJson(json_path);
  std::filesystem::remove(json_path);
  EXPECT_TRUE(report.contains("runs") && report["runs"].size() == 1) << report.dump(2);
  if (report.contains("runs") && report["runs"].size() == 1) m.run = report["runs"][0];
  return m;
}

TEST(BenchE2eTest, ReportedReuseAndHitsEqualTheServersMetrics) {
  auto server = ServerProcess::Start(kServeFlags);
  ASSERT_TRUE(server.ok()) << server.status();
  const MeasuredRun m = RunSynthetic(**server, {"--sessions=6", "--seed=5"});
  ASSERT_FALSE(m.run.is_null());
  const auto& before = m.before;
  const auto& after = m.after;
  const nlohmann::json& run = m.run;

  const double reused = Moved(before, after, "strata_prefill_tokens_total{source=\"reused\"}");
  const double computed = Moved(before, after, "strata_prefill_tokens_total{source=\"computed\"}");
  const double hbm_hits = Moved(before, after, "strata_cache_hits_total{tier=\"hbm\"}");
  const double host_hits = Moved(before, after, "strata_cache_hits_total{tier=\"host\"}");
  const double hits = hbm_hits + host_hits;
  const double ok = Moved(before, after, "strata_requests_total{code=\"ok\",method=\"strata.v1.ChatService/Chat\"}");
  EXPECT_GT(reused, 0) << "later turns must reuse the session cache";
  EXPECT_GT(hits, 0);
  // Client-side sums of ChatDone against the server's own counters.
  EXPECT_EQ(run["cached_tokens"].get<double>(), reused) << "reused tokens reported vs /metrics";
  EXPECT_EQ(run["computed_tokens"].get<double>(), computed) << "computed tokens reported vs /metrics";
  EXPECT_EQ(run["hits_by_tier"].value("hbm", 0.0), hbm_hits) << "HBM hits reported vs /metrics";
  EXPECT_EQ(run["hits_by_tier"].value("host", 0.0), host_hits) << "host hits reported vs /metrics";
  EXPECT_EQ(run["hits"].get<double>(), hits);
  EXPECT_EQ(run["turns_ok"].get<double>(), ok) << "successful turns reported vs strata_requests_total";
  EXPECT_EQ(run["turns_failed"].get<int>(), 0);
  EXPECT_GE(run["turns_ok"].get<int>(), 6);
  EXPECT_GT(run["ttft_client_ms"]["p99"].get<double>(), 0);
  EXPECT_GE(run["ttft_client_ms"]["p99"].get<double>(), run["ttft_client_ms"]["p50"].get<double>());
  // The /metrics delta bench reports is the same.
  ASSERT_TRUE(run.contains("metrics")) << run.dump(2);
  EXPECT_EQ(run["metrics"]["prefill_reused_tokens"].get<double>(), reused);
  EXPECT_EQ(run["metrics"]["prefill_computed_tokens"].get<double>(), computed);
  EXPECT_EQ(run["metrics"]["hits_by_tier"]["hbm"].get<double>(), hbm_hits);
  EXPECT_EQ(run["metrics"]["hits_by_tier"]["host"].get<double>(), host_hits);
  EXPECT_NE(m.stdout_text.find("TTFT (client)"), std::string::npos) << "no table on stdout:\n" << m.stdout_text;
}

// --chat_stream: each session's turns on one ChatSession call, counted by the server as
// one call a session; the same reuse as Chat calls, reported as the server counted it.
TEST(BenchE2eTest, ChatStreamSendsEachSessionsTurnsOnOneCall) {
  auto server = ServerProcess::Start(kServeFlags);
  ASSERT_TRUE(server.ok()) << server.status();
  const MeasuredRun m = RunSynthetic(**server, {"--sessions=5", "--seed=7", "--chat_stream"});
  ASSERT_FALSE(m.run.is_null());
  const auto& before = m.before;
  const auto& after = m.after;
  const nlohmann::json& run = m.run;
  EXPECT_EQ(run["turns_failed"].get<int>(), 0);
  EXPECT_GE(run["turns_ok"].get<int>(), 5);
  EXPECT_EQ(Moved(before, after, "strata_requests_total{code=\"ok\",method=\"strata.v1.ChatService/ChatSession\"}"),
            5)
      << "one stream a session";
  EXPECT_EQ(Moved(before, after, "strata_requests_total{code=\"ok\",method=\"strata.v1.ChatService/Chat\"}"), 0);
  const double reused = Moved(before, after, "strata_prefill_tokens_total{source=\"reused\"}");
  EXPECT_GT(reused, 0) << "later turns on a stream must reuse the session cache";
  EXPECT_EQ(run["cached_tokens"].get<double>(), reused);

  // A sweep whose server restarts between its rounds: the streams of turn 1 are gone with
  // it, and turn 2 opens new ones.
  const std::string base = "/tmp/strata-bench-e2e-stream-ssd-" + std::to_string(getpid());
  std::filesystem::create_directories(base + "/ssd");
  BenchProcess sweep({"--sweep", "--history=64", "--new_tokens=8", "--concurrency=2", "--sweep_from_ssd",
                      "--chat_stream",
                      "--serve_flags=--device=cpu --pin_host_memory=false --chunk_tokens=16 --ssd_dirs=" + base +
                          "/ssd --ssd_capacity_bytes=16777216",
                      "--json=" + base + "/report.json"});
  ASSERT_EQ(sweep.Wait(), 0) << "stderr:\n" << sweep.Stderr() << "\nstdout:\n" << sweep.Stdout();
  const nlohmann::json swept = ReadJson(base + "/report.json");
  std::filesystem::remove_all(base);
  ASSERT_TRUE(swept.contains("sweep") && swept["sweep"].size() == 1) << swept.dump(2);
  EXPECT_EQ(swept["sweep"][0]["runs"][0]["turns_ok"].get<int>(), 4);
  EXPECT_GE(swept["sweep"][0]["runs"][0]["cached_tokens"].get<int>(), 2 * 64);
}

TEST(BenchE2eTest, ServerKilledMidRunExitsNonZeroWithUnavailableErrors) {
  auto server = ServerProcess::Start(kServeFlags);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string json_path = "/tmp/strata-bench-e2e-killed-" + std::to_string(getpid()) + ".json";
  BenchProcess bench({"--target=" + (*server)->target(), "--sessions=40", "--rate=8", "--turns=4",
                      "--prompt_tokens=24", "--output_tokens=6", "--think_s=0.3", "--json=" + json_path});
  // Kill the server once the bench is under way.
  bool started = false;
  for (int i = 0; i < 300 && !started; ++i) {
    started = Moved({}, Scrape(**server), "strata_requests_total{code=\"ok\",method=\"strata.v1.ChatService/Chat\"}") >= 3;
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(started) << "bench never got three turns through";
  kill((*server)->pid(), SIGKILL);
  const int code = bench.Wait();
  EXPECT_NE(code, 0) << "a bench whose server died must fail";
  EXPECT_NE(code, -1) << "bench hung or crashed after its server died; stderr:\n" << bench.Stderr();
  const nlohmann::json report = ReadJson(json_path);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(report.contains("runs")) << report.dump(2);
  const nlohmann::json& run = report["runs"][0];
  EXPECT_GT(run["errors_by_code"].value("unavailable", 0), 0) << run.dump(2);
  EXPECT_GT(run["turns_failed"].get<int>(), 0);
  EXPECT_GT(run["turns_ok"].get<int>(), 0);
  EXPECT_NE(bench.Stdout().find("unavailable"), std::string::npos) << "errors by status not in the table:\n"
                                                                   << bench.Stdout();
}

TEST(BenchE2eTest, BadFlagsExitTwoWithAOneLineMessage) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--rate=-1"}, "--rate"},
      {{"--workload=nope"}, "nope"},
      {{"--trace=/nonexistent/trace.jsonl"}, "/nonexistent/trace.jsonl"},
      {{"--sweep", "--history=12x"}, "--history"},
      {{"--compare=cache_maybe"}, "--compare"},
      {{"--json=/nonexistent/dir/report.json"}, "/nonexistent/dir"},
      {{"--max_differing_turns=0"}, "--max_differing_turns"},
      {{"--compare=cache_off", "--max_differing_turns=-2"}, "--max_differing_turns"},
  };
  for (const auto& [flags, mention] : cases) {
    BenchProcess bench(flags);
    EXPECT_EQ(bench.Wait(), 2) << flags[0];
    const std::string err = bench.Stderr();
    EXPECT_NE(err.find(mention), std::string::npos) << flags[0] << ": message does not name it: " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << flags[0] << ": not one line: " << err;
    EXPECT_EQ(err.rfind("strata bench: ", 0), 0u) << err;
  }
}

// On the CPU backend, whose answers with the cache are exactly those without: any
// differing answer is a bug, which --max_differing_turns=0 turns into a failed bench.
TEST(BenchE2eTest, StartsItsOwnServersAndComparesWithCacheOff) {
  const std::string json_path = "/tmp/strata-bench-e2e-sweep-" + std::to_string(getpid()) + ".json";
  BenchProcess bench({"--sweep", "--history=64", "--new_tokens=8", "--concurrency=2", "--compare=cache_off",
                      "--max_differing_turns=0", "--serve_flags=--device=cpu --pin_host_memory=false --chunk_tokens=16",
                      "--json=" + json_path});
  ASSERT_EQ(bench.Wait(), 0) << "stderr:\n" << bench.Stderr();
  const nlohmann::json report = ReadJson(json_path);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(report.contains("sweep") && report["sweep"].size() == 1) << report.dump(2);
  const nlohmann::json& runs = report["sweep"][0]["runs"];
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["label"], "cached");
  EXPECT_EQ(runs[1]["label"], "recomputed");
  EXPECT_EQ(runs[0]["ttft_client_ms"]["count"].get<int>(), 2) << "two turn-2s measured";
  EXPECT_EQ(runs[0]["turns_ok"].get<int>(), 4);
  EXPECT_GE(runs[0]["cached_tokens"].get<int>(), 2 * 64) << "turn 2 must reuse turn 1's history";
  EXPECT_EQ(runs[0]["metrics"]["prefill_reused_tokens"].get<double>(), runs[0]["cached_tokens"].get<double>());
  EXPECT_EQ(runs[1]["cached_tokens"].get<int>(), 0) << "the cache_off server reused tokens";
  EXPECT_EQ(runs[1]["metrics"]["prefill_reused_tokens"].get<double>(), 0);
  // A sweep's /metrics delta covers the measured round (the turn 2s) only.
  EXPECT_EQ(runs[0]["metrics"]["ttft_count"].get<double>(), 2) << runs[0]["metrics"].dump();
  EXPECT_NEAR(runs[0]["metrics"]["queue_sum_s"].get<double>() + runs[0]["metrics"]["prefill_sum_s"].get<double>(),
              runs[0]["metrics"]["ttft_sum_s"].get<double>(), 1e-3);
  EXPECT_EQ(runs[0]["metrics"]["kv_load_bytes"].get<double>(), 0) << "turn 2 found its history in HBM";
  EXPECT_GT(runs[0]["metrics"]["kv_save_bytes"].get<double>(), 0) << "turn 2's write-back";
  EXPECT_NE(bench.Stdout().find("ratio p50"), std::string::npos) << bench.Stdout();
  // Both turns of both sessions answered alike, turn 2 on a reused history.
  ASSERT_TRUE(report.contains("answers")) << report.dump(2);
  const nlohmann::json& answers = report["answers"];
  EXPECT_EQ(answers["turns_compared"].get<int>(), 4) << answers.dump();
  EXPECT_EQ(answers["turns_equal"].get<int>(), 4) << "cached answers differ from recomputed ones: " << answers.dump();
  EXPECT_EQ(answers["first_turns_equal"].get<int>(), 2) << answers.dump();
  EXPECT_EQ(answers["sessions_diverged"].get<int>(), 0) << answers.dump();
  EXPECT_EQ(answers["turns_not_compared"].get<int>(), 0) << answers.dump();
  EXPECT_EQ(report["sweep"][0]["answers"], answers) << "one shape: its row's counts are the total";
  EXPECT_NE(bench.Stdout().find("answers: 4 of 4 turns equal the cache-off server's (first turns 2 of 2); "
                                "0 of 2 sessions diverged\n"),
            std::string::npos)
      << bench.Stdout();
}

// A synthetic run of several turns a session (each turn's prompt holds the earlier
// answers): every answer of the cached server equals the cache-off server's.
TEST(BenchE2eTest, CompareFindsEveryAnswerEqualToTheCacheOffServers) {
  const std::string json_path = "/tmp/strata-bench-e2e-answers-" + std::to_string(getpid()) + ".json";
  BenchProcess bench({"--sessions=4", "--seed=11", "--rate=20", "--turns=3", "--prompt_tokens=24",
                      "--output_tokens=6", "--think_s=0.1", "--compare=cache_off", "--max_differing_turns=0",
                      "--serve_flags=--device=cpu --pin_host_memory=false --chunk_tokens=16", "--json=" + json_path});
  ASSERT_EQ(bench.Wait(std::chrono::seconds(120)), 0) << "stderr:\n" << bench.Stderr() << "\nstdout:\n"
                                                      << bench.Stdout();
  const nlohmann::json report = ReadJson(json_path);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(report.contains("answers") && report.contains("runs")) << report.dump(2);
  const int turns = report["turns"].get<int>();
  EXPECT_GT(turns, 4) << "later turns too";
  EXPECT_GT(report["runs"][0]["cached_tokens"].get<int>(), 0) << "the cached server reused no history";
  const nlohmann::json& answers = report["answers"];
  EXPECT_EQ(answers["turns_compared"].get<int>(), turns) << answers.dump();
  EXPECT_EQ(answers["turns_equal"].get<int>(), turns)
      << "cached answers differ from recomputed ones: " << answers.dump();
  EXPECT_EQ(answers["turns_differing"].get<int>(), 0) << answers.dump();
  EXPECT_EQ(answers["first_turns_equal"].get<int>(), 4) << answers.dump();
  EXPECT_EQ(answers["sessions_diverged"].get<int>(), 0) << answers.dump();
  const std::string line = absl::StrCat("answers: ", turns, " of ", turns,
                                        " turns equal the cache-off server's (first turns 4 of 4); 0 of 4 sessions "
                                        "diverged\n");
  EXPECT_NE(bench.Stdout().find(line), std::string::npos) << bench.Stdout();
}

// --max_differing_turns fails the bench when the answers differ: here the "cache-off"
// server is one with another model, so the first turns already answer otherwise.
TEST(BenchE2eTest, MaxDifferingTurnsFailsTheBenchWhenAnswersDiffer) {
  auto random_model = ServerProcess::Start(kServeFlags);
  ASSERT_TRUE(random_model.ok()) << random_model.status();
  std::vector<std::string> trained_flags = kServeFlags;
  trained_flags.push_back("--model=");  // the built-in trained model
  auto trained_model = ServerProcess::Start(trained_flags);
  ASSERT_TRUE(trained_model.ok()) << trained_model.status();
  const std::string json_path = "/tmp/strata-bench-e2e-differ-" + std::to_string(getpid()) + ".json";
  BenchProcess bench({"--target=" + (*random_model)->target(), "--compare=cache_off",
                      "--compare_target=" + (*trained_model)->target(), "--max_differing_turns=0", "--sessions=3",
                      "--seed=13", "--rate=20", "--turns=2", "--prompt_tokens=16", "--output_tokens=6",
                      "--think_s=0.1", "--json=" + json_path});
  EXPECT_EQ(bench.Wait(), 1) << "stderr:\n" << bench.Stderr() << "\nstdout:\n" << bench.Stdout();
  const nlohmann::json report = ReadJson(json_path);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(report.contains("answers")) << report.dump(2);
  EXPECT_GT(report["answers"]["turns_differing"].get<int>(), 0) << report["answers"].dump();
  EXPECT_EQ(report["failed"], true);
  EXPECT_NE(bench.Stdout().find("; differing: s"), std::string::npos) << bench.Stdout();
  EXPECT_NE(bench.Stderr().find("more than --max_differing_turns=0"), std::string::npos) << bench.Stderr();
}

// --warm_system_prompts: one unmeasured turn per system prompt before the run, so every
// measured turn runs on a prompt already held (none computed during the run); without it
// the run computes each prompt once.
TEST(BenchE2eTest, WarmSystemPromptsAreComputedBeforeTheMeasuredRun) {
  for (bool warm : {false, true}) {
    const std::string json_path =
        "/tmp/strata-bench-e2e-warm-" + std::to_string(getpid()) + (warm ? "-warm" : "-cold") + ".json";
    std::vector<std::string> flags = {"--sessions=6", "--rate=1000", "--turns=1", "--prompt_tokens=8",
                                      "--output_tokens=2", "--max_output_tokens=2", "--system_prompts=2",
                                      "--system_prompt_tokens=160", "--max_context_tokens=400",
                                      "--serve_flags=--pin_host_memory=false --chunk_tokens=16 "
                                      "--min_shared_prompt_tokens=64",
                                      "--json=" + json_path};
    if (warm) flags.push_back("--warm_system_prompts");
    BenchProcess bench(flags);
    ASSERT_EQ(bench.Wait(std::chrono::seconds(120)), 0) << "stderr:\n" << bench.Stderr();
    const nlohmann::json report = ReadJson(json_path);
    std::filesystem::remove(json_path);
    ASSERT_TRUE(report.contains("runs") && !report["runs"].empty()) << report.dump(2);
    const nlohmann::json& run = report["runs"][0];
    EXPECT_EQ(run["turns_ok"].get<int>(), 6);
    const nlohmann::json& m = run["metrics"];
    const int computed = m["system_prompts_computed"].get<int>();
    const int hits = m["system_prompt_hits"].get<int>();
    if (warm) {
      EXPECT_EQ(computed, 0) << "the warm-up computed the prompts before the run";
      EXPECT_EQ(hits, 6) << "every measured turn found its prompt held";
    } else {
      EXPECT_GE(computed, 1) << "a cold run computes the prompts it uses";
    }
  }
}

// --sweep_from_ssd: turn 1, every session persisted, the server restarted: turn 2 reuses
// turn 1's history from the SSD tier (the host tier and HBM are empty after a restart).
// On the CPU backend: on a GPU, fetch-or-recompute rightly recomputes a 64-token history of
// the built-in model (faster than any SSD read), so nothing would come from the SSD.
TEST(BenchE2eTest, SweepFromSsdServesTurnTwoFromTheSsdTierAfterARestart) {
  const std::string base = "/tmp/strata-bench-e2e-ssd-" + std::to_string(getpid());
  std::filesystem::create_directories(base + "/ssd");
  const std::string json_path = base + "/report.json";
  BenchProcess bench({"--sweep", "--history=64", "--new_tokens=8", "--concurrency=2", "--sweep_from_ssd",
                      "--serve_flags=--device=cpu --pin_host_memory=false --chunk_tokens=16 --ssd_dirs=" + base +
                          "/ssd --ssd_capacity_bytes=16777216",
                      "--json=" + json_path});
  ASSERT_EQ(bench.Wait(), 0) << "stderr:\n" << bench.Stderr() << "\nstdout:\n" << bench.Stdout();
  const nlohmann::json report = ReadJson(json_path);
  std::filesystem::remove_all(base);
  ASSERT_TRUE(report.contains("sweep") && report["sweep"].size() == 1) << report.dump(2);
  const nlohmann::json& run = report["sweep"][0]["runs"][0];
  EXPECT_EQ(run["turns_ok"].get<int>(), 4);
  EXPECT_GE(run["cached_tokens"].get<int>(), 2 * 64) << "turn 2 must reuse turn 1's history from SSD";
  // Both hits come from the SSD: read at admission (an "ssd" hit) or, for a turn that waited
  // in the queue, brought up to the host tier by the store's look-ahead first (a "host" hit:
  // after the restart nothing else can have put it there).
  EXPECT_EQ(run["hits_by_tier"].value("ssd", 0) + run["hits_by_tier"].value("host", 0), 2) << run.dump(2);
  EXPECT_EQ(run["hits_by_tier"].value("hbm", 0), 0) << run.dump(2);
  // Without an SSD tier the flag is refused.
  BenchProcess bad({"--sweep", "--sweep_from_ssd"});
  EXPECT_EQ(bad.Wait(), 2);
  EXPECT_NE(bad.Stderr().find("--ssd_dirs"), std::string::npos) << bad.Stderr();
}

}  // namespace
}  // namespace strata
