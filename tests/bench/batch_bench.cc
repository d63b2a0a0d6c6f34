// Batches with shared prefixes (issue #22): the token saving ratio of the plans on
// synthetic batches of known structure against the prefix tree's ideal, then throughput of
// one batch through a real server: each prompt through Chat (session cache, shared system
// prompt), BatchGenerate with plain first-level prefix reuse, and BatchGenerate planned
// globally (BatchLLM) — in the same run, on the same server.
//
//   build/tests/bench/batch_bench [--quick] [--plan_only] [--strata=build/strata]
//       [--serve_flags="--model=random:llama3-8b --device=cuda"] [--docs=16 --questions=16
//       --system_tokens=512 --doc_tokens=1024 --question_tokens=32 --max_new_tokens=32]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "batch/batch_plan.h"
#include "server/serve_process.h"
#include "strata/v1/batch.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"

ABSL_FLAG(bool, quick, false, "a small run (ctest)");
ABSL_FLAG(bool, plan_only, false, "only the token saving table (no server)");
ABSL_FLAG(std::string, strata, "build/strata", "the strata binary that serves");
ABSL_FLAG(std::string, serve_flags, "--model=random:builtin", "flags of `strata serve` (space-separated)");
ABSL_FLAG(int, docs, 16, "documents of the throughput batch");
ABSL_FLAG(int, questions, 16, "questions per document");
ABSL_FLAG(int, system_tokens, 512, "the shared system prompt");
ABSL_FLAG(int, doc_tokens, 1024, "each document");
ABSL_FLAG(int, question_tokens, 32, "each question");
ABSL_FLAG(int, max_new_tokens, 32, "answer length (greedy)");
ABSL_FLAG(int, chat_concurrency, 64, "Chat calls in flight in the Chat mode");

namespace strata {
namespace {

using Prompt = std::vector<int32_t>;

// Token runs that share nothing with each other (printable bytes of the built-in
// tokenizer, from a seeded generator).
class Parts {
 public:
  Prompt Make(int n) {
    Prompt p(static_cast<size_t>(n));
    for (int32_t& t : p) t = 32 + static_cast<int32_t>(rng_() % 95);
    return p;
  }

 private:
  std::mt19937 rng_{20261124};
};

Prompt Concat(std::initializer_list<const Prompt*> parts) {
  Prompt out;
  for (const Prompt* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// system + doc + question: `docs` documents with `questions` each.
std::vector<Prompt> TwoLevel(Parts& parts, int system, int docs, int questions, int doc, int question) {
  const Prompt s = parts.Make(system);
  std::vector<Prompt> out;
  for (int d = 0; d < docs; ++d) {
    const Prompt dd = parts.Make(doc);
    for (int q = 0; q < questions; ++q) {
      const Prompt qq = parts.Make(question);
      out.push_back(Concat({&s, &dd, &qq}));
    }
  }
  return out;
}

// system + doc + section + question.
std::vector<Prompt> ThreeLevel(Parts& parts, int system, int docs, int sections, int questions, int doc, int section,
                               int question) {
  const Prompt s = parts.Make(system);
  std::vector<Prompt> out;
  for (int d = 0; d < docs; ++d) {
    const Prompt dd = parts.Make(doc);
    for (int k = 0; k < sections; ++k) {
      const Prompt ss = parts.Make(section);
      for (int q = 0; q < questions; ++q) {
        const Prompt qq = parts.Make(question);
        out.push_back(Concat({&s, &dd, &ss, &qq}));
      }
    }
  }
  return out;
}

void SavingTable(bool quick) {
  struct Row {
    std::string name;
    std::vector<Prompt> prompts;
  };
  Parts parts;
  std::vector<Row> rows;
  rows.push_back({"2-level, 32 docs x 4 questions", TwoLevel(parts, 512, 32, 4, 1024, 32)});
  rows.push_back({"2-level, 8 docs x 16 questions", TwoLevel(parts, 512, 8, 16, 1024, 32)});
  rows.push_back({"2-level, 2 docs x 64 questions", TwoLevel(parts, 512, 2, 64, 1024, 32)});
  rows.push_back({"2-level, 8 x 16, 256-token questions", TwoLevel(parts, 512, 8, 16, 1024, 256)});
  rows.push_back({"2-level, 8 x 16, short docs (128)", TwoLevel(parts, 512, 8, 16, 128, 32)});
  rows.push_back({"2-level, no system prompt, 8 x 16", TwoLevel(parts, 0, 8, 16, 1024, 32)});
  rows.push_back({"3-level, 4 docs x 4 sections x 8 q", ThreeLevel(parts, 256, 4, 4, 8, 1024, 512, 32)});
  rows.push_back({"3-level, 4 docs x 16 sections x 2 q", ThreeLevel(parts, 256, 4, 16, 2, 1024, 512, 32)});
  if (quick) rows.resize(2);
  std::printf("## Token saving ratio (BatchLLM Eq. 2: 1 - computed / prompt tokens), page granularity 16\n\n");
  std::printf("| batch | prompts | prompt tokens | ideal (tree) | global (DP) | first-level | none |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    std::vector<batch::PlanPrompt> view;
    for (const Prompt& p : row.prompts) view.push_back({p, 32});
    auto plan = [&](batch::Planning planning) {
      return batch::MakePlan(view, batch::PlanOptions{.planning = planning, .granularity = 16});
    };
    const batch::Plan global = plan(batch::Planning::kGlobal);
    std::printf("| %s | %zu | %lld | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", row.name.c_str(), row.prompts.size(),
                static_cast<long long>(global.prompt_tokens), 100 * global.ideal_saving_ratio(),
                100 * global.saving_ratio(), 100 * plan(batch::Planning::kFirstLevel).saving_ratio(),
                100 * plan(batch::Planning::kNone).saving_ratio());
  }
  std::printf("\n");
}

struct ModeResult {
  double seconds = 0;
  int64_t completed = 0;
  int64_t generated = 0;
  int64_t computed = 0;  // prompt tokens the server computed (Σ usage; a group's prefix once)
  std::vector<std::vector<int32_t>> answers;
};

ModeResult RunChat(const std::string& target, const std::vector<Prompt>& prompts, int system, int max_new,
                   int concurrency, const std::string& tag) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::ChatService::NewStub(channel);
  ModeResult out;
  out.answers.resize(prompts.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> generated{0}, computed{0}, completed{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < prompts.size();) {
        v1::ChatRequest r;
        r.set_session_id(tag + std::to_string(i));
        r.mutable_token_ids()->Add(prompts[i].begin(), prompts[i].end());
        r.set_system_prefix_tokens(static_cast<uint32_t>(system));
        r.set_max_new_tokens(static_cast<uint32_t>(max_new));
        grpc::ClientContext context;
        auto reader = stub->Chat(&context, r);
        v1::ChatEvent e;
        while (reader->Read(&e)) {
          if (e.has_delta()) {
            out.answers[i].insert(out.answers[i].end(), e.delta().token_ids().begin(), e.delta().token_ids().end());
          }
          if (e.has_done()) {
            generated += e.done().usage().completion_tokens();
            computed += e.done().usage().computed_tokens();
            ++completed;
          }
        }
        if (grpc::Status s = reader->Finish(); !s.ok()) std::fprintf(stderr, "chat: %s\n", s.error_message().c_str());
      }
    });
  }
  for (auto& t : threads) t.join();
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  out.generated = generated;
  out.computed = computed;
  out.completed = completed;
  return out;
}

ModeResult RunBatch(const std::string& target, const std::vector<Prompt>& prompts, int max_new,
                    v1::BatchPlanning planning, v1::BatchPlanInfo* plan) {
  auto stub = v1::BatchService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ModeResult out;
  out.answers.resize(prompts.size());
  const absl::Time start = absl::Now();
  auto call = stub->BatchGenerate(&context);
  v1::BatchRequest r;
  r.mutable_options()->set_planning(planning);
  call->Write(r);
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::BatchPrompt* p = r.mutable_prompt();
    p->Clear();
    p->set_id(std::to_string(i));
    p->mutable_token_ids()->Add(prompts[i].begin(), prompts[i].end());
    p->set_max_new_tokens(static_cast<uint32_t>(max_new));
    call->Write(r);
  }
  call->WritesDone();
  v1::BatchEvent e;
  while (call->Read(&e)) {
    if (e.has_plan()) {
      *plan = e.plan();
      out.computed = static_cast<int64_t>(e.plan().computed_tokens());
    }
    if (e.has_result() && !e.result().has_error()) {
      ++out.completed;
      out.generated += e.result().usage().completion_tokens();
      out.answers[e.result().index()].assign(e.result().token_ids().begin(), e.result().token_ids().end());
    }
  }
  if (grpc::Status s = call->Finish(); !s.ok()) std::fprintf(stderr, "batch: %s\n", s.error_message().c_str());
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return out;
}

int Throughput(bool quick) {
  const int docs = quick ? 2 : absl::GetFlag(FLAGS_docs), questions = quick ? 4 : absl::GetFlag(FLAGS_questions);
  const int system = quick ? 64 : absl::GetFlag(FLAGS_system_tokens);
  const int doc = quick ? 128 : absl::GetFlag(FLAGS_doc_tokens);
  const int question = quick ? 16 : absl::GetFlag(FLAGS_question_tokens);
  const int max_new = quick ? 4 : absl::GetFlag(FLAGS_max_new_tokens);
  const std::vector<std::string> flags = absl::StrSplit(absl::GetFlag(FLAGS_serve_flags), ' ', absl::SkipEmpty());
  auto server = server::ServeProcess::Start(absl::GetFlag(FLAGS_strata), flags);
  if (!server.ok()) {
    std::fprintf(stderr, "batch_bench: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string target = (*server)->target();
  Parts parts;
  // A warm-up batch of other prompts (kernels, allocator, the server's first turns).
  {
    v1::BatchPlanInfo ignored;
    RunBatch(target, TwoLevel(parts, system, 1, 4, doc, question), max_new, v1::BATCH_PLANNING_GLOBAL, &ignored);
    RunChat(target, TwoLevel(parts, system, 1, 4, doc, question), system, max_new, 4, "warm-");
  }
  const std::vector<Prompt> prompts = TwoLevel(parts, system, docs, questions, doc, question);
  int64_t prompt_tokens = 0;
  for (const Prompt& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  // The same prompts four ways. Each prompt alone (no sharing, as with the cache off) is
  // the reference the answers are compared with.
  std::vector<std::pair<std::string, ModeResult>> modes;
  v1::BatchPlanInfo none_plan;
  modes.emplace_back("BatchGenerate, no sharing (reference)",
                     RunBatch(target, prompts, max_new, v1::BATCH_PLANNING_NONE, &none_plan));
  modes.emplace_back("Chat (session cache, shared system prompt)",
                     RunChat(target, prompts, system, max_new, absl::GetFlag(FLAGS_chat_concurrency), "chat-"));
  v1::BatchPlanInfo first_plan, global_plan;
  modes.emplace_back("BatchGenerate, first-level prefix reuse",
                     RunBatch(target, prompts, max_new, v1::BATCH_PLANNING_FIRST_LEVEL, &first_plan));
  modes.emplace_back("BatchGenerate, global plan (BatchLLM)",
                     RunBatch(target, prompts, max_new, v1::BATCH_PLANNING_GLOBAL, &global_plan));
  std::printf("## Throughput: %zu prompts (%d docs x %d questions; system %d + doc %d + question %d tokens), %d new "
              "tokens each, greedy; server: %s\n\n",
              prompts.size(), docs, questions, system, doc, question, max_new,
              absl::GetFlag(FLAGS_serve_flags).c_str());
  std::printf("| mode | seconds | prompts/s | output tokens/s | prompt tokens computed | answers equal to the "
              "reference | first tokens equal |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  const ModeResult& reference = modes.front().second;
  const ModeResult& global = modes.back().second;
  double best_peer = 0;  // Chat or first-level reuse
  for (size_t k = 0; k < modes.size(); ++k) {
    const auto& [name, m] = modes[k];
    int equal = 0, first = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      equal += m.answers[i] == reference.answers[i];
      first += !m.answers[i].empty() && !reference.answers[i].empty() && m.answers[i][0] == reference.answers[i][0];
    }
    const double rate = m.completed / m.seconds;
    if (k == 1 || k == 2) best_peer = std::max(best_peer, rate);
    std::printf("| %s | %.2f | %.2f | %.0f | %lld of %lld | %d/%zu | %d/%zu |\n", name.c_str(), m.seconds, rate,
                m.generated / m.seconds, static_cast<long long>(m.computed), static_cast<long long>(prompt_tokens),
                equal, prompts.size(), first, prompts.size());
  }
  std::printf("\nglobal plan vs the better peer: %.2fx prompts/s; plan saving %.1f%% (first-level %.1f%%, ideal "
              "%.1f%%)\n",
              global.completed / global.seconds / best_peer, 100 * global_plan.token_saving_ratio(),
              100 * first_plan.token_saving_ratio(), 100 * global_plan.ideal_token_saving_ratio());
  const bool all = global.completed == static_cast<int64_t>(prompts.size());
  return all ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const bool quick = absl::GetFlag(FLAGS_quick);
  strata::SavingTable(quick);
  if (absl::GetFlag(FLAGS_plan_only)) return 0;
  return strata::Throughput(quick);
}
