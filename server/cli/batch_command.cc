// `strata batch`: runs a JSONL file of prompts through a running server's BatchService
// (server/batch_jsonl.h has the line formats) and writes the results, one line each, as
// they finish, with a progress bar on stderr.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/batch_jsonl.h"
#include "server/cli/commands.h"
#include "server/cli/shared_flags.h"
#include "strata/v1/batch.grpc.pb.h"

ABSL_FLAG(std::string, in, "", "batch: the prompts, a JSONL file (one JSON object a line)");
ABSL_FLAG(std::string, out, "", "batch: where the results go, one JSON line each as they finish (- for stdout)");
ABSL_FLAG(std::string, planning, "global",
          "batch: global (prefix tree, shared prefixes chosen by DP, decode-heavy groups first), first_level (plain "
          "prefix reuse, input order) or none");

namespace strata::server::cli {
namespace {

// A progress bar on a terminal; elsewhere a line per tenth of the batch.
class Progress {
 public:
  // `first` prompts are done already (answered here): the rate counts the server's.
  Progress(int total, int first) : total_(total), first_(first), tty_(isatty(STDERR_FILENO) != 0), start_(absl::Now()) {}
  void Update(int done, int failed) {
    const double s = absl::ToDoubleSeconds(absl::Now() - start_);
    const double rate = s > 0 ? (done - first_) / s : 0;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
      std::fprintf(stderr, "\r[%s%s] %d/%d prompts, %d failed, %.1f prompts/s ", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, '.').c_str(), done, total_, failed, rate);
      if (done == total_) std::fprintf(stderr, "\n");
    } else if (total_ > 0 && (done * 10 / total_ != last_tenth_ || done == total_)) {
      last_tenth_ = done * 10 / total_;
      std::fprintf(stderr, "progress: %d/%d prompts, %d failed, %.1f prompts/s\n", done, total_, failed, rate);
    }
  }

 private:
  const int total_;
  const int first_;
  const bool tty_;
  const absl::Time start_;
  int last_tenth_ = -1;
};

}  // namespace

int BatchCommand() {
  const std::string in_path = absl::GetFlag(FLAGS_in), out_path = absl::GetFlag(FLAGS_out);
  if (in_path.empty() || out_path.empty()) {
    std::fprintf(stderr, "strata batch: give --in prompts.jsonl and --out results.jsonl\n");
    return 2;
  }
  v1::BatchPlanning planning;
  const std::string p = absl::GetFlag(FLAGS_planning);
  if (p == "global") {
    planning = v1::BATCH_PLANNING_GLOBAL;
  } else if (p == "first_level") {
    planning = v1::BATCH_PLANNING_FIRST_LEVEL;
  } else if (p == "none") {
    planning = v1::BATCH_PLANNING_NONE;
  } else {
    std::fprintf(stderr, "strata batch: --planning is global, first_level or none, not '%s'\n", p.c_str());
    return 2;
  }
  std::ifstream in(in_path);
  if (!in) {
    std::fprintf(stderr, "strata batch: cannot read %s\n", in_path.c_str());
    return 1;
  }
  FILE* out = out_path == "-" ? stdout : std::fopen(out_path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "strata batch: cannot write %s\n", out_path.c_str());
    return 1;
  }
  auto write_line = [out](const std::string& line) {
    std::fprintf(out, "%s\n", line.c_str());
    std::fflush(out);
  };

  // Malformed lines are answered here, with their line; the others go to the server.
  std::vector<v1::BatchPrompt> prompts;
  std::vector<int> line_of;
  int malformed = 0, lines = 0;
  for (std::string text; std::getline(in, text);) {
    ++lines;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string id;
    auto prompt = ParseBatchLine(text, &id);
    if (!prompt.ok()) {
      write_line(ErrorLine(id, lines, prompt.status()));
      ++malformed;
      continue;
    }
    prompts.push_back(*std::move(prompt));
    line_of.push_back(lines);
  }
  const int total = static_cast<int>(prompts.size()) + malformed;
  if (total == 0) {
    std::fprintf(stderr, "strata batch: %s holds no prompts\n", in_path.c_str());
    if (out != stdout) std::fclose(out);
    return 1;
  }
  Progress progress(total, malformed);
  int done = malformed, failed = malformed;
  progress.Update(done, failed);
  int rc = 0;
  if (!prompts.empty()) {
    auto stub = v1::BatchService::NewStub(grpc::CreateChannel(TargetFromFlags(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    if (!absl::GetFlag(FLAGS_api_key).empty()) context.AddMetadata("authorization", "Bearer " + absl::GetFlag(FLAGS_api_key));
    auto call = stub->BatchGenerate(&context);
    v1::BatchRequest request;
    request.mutable_options()->set_planning(planning);
    bool sent = call->Write(request);
    for (size_t i = 0; sent && i < prompts.size(); ++i) {
      *request.mutable_prompt() = std::move(prompts[i]);
      sent = call->Write(request);
    }
    call->WritesDone();
    v1::BatchEvent event;
    while (call->Read(&event)) {
      if (event.has_plan()) {
        const v1::BatchPlanInfo& plan = event.plan();
        std::fprintf(stderr, "planned %u prompts in %u shared-prefix groups: %.1f%% of %llu prompt tokens saved "
                     "(the prefix tree's ideal: %.1f%%)\n",
                     plan.prompts(), plan.groups(), 100 * plan.token_saving_ratio(),
                     static_cast<unsigned long long>(plan.prompt_tokens()), 100 * plan.ideal_token_saving_ratio());
      } else if (event.has_result()) {
        const v1::BatchResult& r = event.result();
        const int line = r.index() < line_of.size() ? line_of[r.index()] : 0;
        write_line(ResultLine(r, line));
        ++done;
        failed += r.has_error();
        progress.Update(done, failed);
      } else if (event.has_summary()) {
        const v1::BatchSummary& s = event.summary();
        std::fprintf(stderr, "done: %d prompts, %d failed, %llu tokens generated in %.2f s (%.2f prompts/s, %.1f "
                     "tokens/s)\n",
                     done, failed, static_cast<unsigned long long>(s.generated_tokens()), s.seconds(),
                     s.seconds() > 0 ? (s.completed() + s.failed()) / s.seconds() : 0.0,
                     s.seconds() > 0 ? static_cast<double>(s.generated_tokens()) / s.seconds() : 0.0);
      }
    }
    const grpc::Status status = call->Finish();
    if (!status.ok()) {
      std::fprintf(stderr, "strata batch: %s\n", status.error_message().c_str());
      rc = 1;
    }
  }
  if (out != stdout) std::fclose(out);
  if (rc == 0 && failed > 0) rc = 3;
  return rc;
}

}  // namespace strata::server::cli
