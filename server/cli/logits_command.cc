// `strata logits`: the model's logits for given token sequences, as JSON, for comparing
// the backends with a reference (tests/gpu/check_hf_logits.py).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "model/logits_dump.h"
#include "server/cli/commands.h"
#include "server/cli/shared_flags.h"

ABSL_FLAG(std::string, tokens, "", "logits: token sequences, comma-separated ids, sequences separated by ';'");

namespace strata::server::cli {

int LogitsCommand() {
  std::vector<std::vector<int32_t>> sequences;
  for (absl::string_view seq : absl::StrSplit(absl::GetFlag(FLAGS_tokens), ';', absl::SkipEmpty())) {
    std::vector<int32_t> ids;
    for (absl::string_view id : absl::StrSplit(seq, ',', absl::SkipEmpty())) {
      int32_t t = 0;
      if (!absl::SimpleAtoi(id, &t)) {
        std::fprintf(stderr, "--tokens: '%s' is not a token id\n", std::string(id).c_str());
        return 2;
      }
      ids.push_back(t);
    }
    sequences.push_back(std::move(ids));
  }
  auto served = engine::LoadServedModel(ServedModelFromFlags());
  if (!served.ok()) {
    std::fprintf(stderr, "%s\n", std::string(served.status().message()).c_str());
    return 1;
  }
  auto json = model::DumpLogits(*served->backend, sequences);
  if (!json.ok()) {
    std::fprintf(stderr, "%s\n", std::string(json.status().message()).c_str());
    return 2;
  }
  std::printf("%s\n", json->c_str());
  return 0;
}

}  // namespace strata::server::cli
