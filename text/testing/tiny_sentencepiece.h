// A small tokenizer.model trained at test time by the SentencePiece library's own spm_train
// (Debian's `sentencepiece` package), shaped like Llama 2's: BPE, byte fallback, digits
// split, no normalization rule, whitespace kept, dummy prefix "▁", <unk>=0 <s>=1 </s>=2.
// Characters absent from the corpus (emoji) fall back to bytes.
#ifndef STRATA_TEXT_TESTING_TINY_SENTENCEPIECE_H_
#define STRATA_TEXT_TESTING_TINY_SENTENCEPIECE_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "text/testing/chat_templates.h"

namespace strata::text::testing {

inline constexpr int kTinySpmVocab = 512;
inline constexpr int kTinySpmUnk = 0;
inline constexpr int kTinySpmBos = 1;
inline constexpr int kTinySpmEos = 2;

// True when spm_train and spm_encode are on the PATH.
inline bool HaveSentencePieceTools() {
  return std::system("command -v spm_train >/dev/null 2>&1 && command -v spm_encode >/dev/null 2>&1") == 0;
}

// Writes `dir`/tokenizer.model (and nothing else it keeps). Returns "" on success, else
// what failed.
inline std::string TrainTinySentencePiece(const std::string& dir) {
  const std::string corpus = dir + "/spm-corpus.txt";
  {
    std::ofstream out(corpus);
    const char* lines[] = {
        "The quick brown fox jumps over the lazy dog.",
        "Hello world! How are you today? I am fine, thank you.",
        "Write a short poem about the sea and the sky.",
        "Numbers like 12345 and 3.14 and 2024 appear in text.",
        "   Leading spaces, trailing spaces   and  double  spaces.",
        "Caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\xBC\xC3\xB6\xC3\xA4 \xC3\x9F",
        "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",  // 你好，世界
        "system user assistant instruction answer question model token cache prefix",
        "def main(): return [x * 2 for x in range(10)]  # code",
    };
    for (int round = 0; round < 40; ++round) {
      for (const char* line : lines) out << line << "\n";
      out << "round " << round << " of the tiny corpus for the tokenizer test\n";
    }
  }
  const std::string prefix = dir + "/tokenizer";
  const std::string command = "spm_train --input=" + corpus + " --model_prefix=" + prefix +
                              " --model_type=bpe --vocab_size=" + std::to_string(kTinySpmVocab) +
                              " --byte_fallback=true --split_digits=true --normalization_rule_name=identity"
                              " --remove_extra_whitespaces=false --add_dummy_prefix=true"
                              " --allow_whitespace_only_pieces=true --character_coverage=1.0"
                              " --hard_vocab_limit=false --minloglevel=2 >" +
                              dir + "/spm_train.log 2>&1";
  const int rc = std::system(command.c_str());
  std::filesystem::remove(corpus);
  std::filesystem::remove(prefix + ".vocab");
  if (rc != 0) return "spm_train failed (is Debian's sentencepiece package installed?): " + command;
  return "";
}

// Llama-2-chat-hf's tokenizer_config.json: its template, <s>/</s>, legacy false and the
// added_tokens_decoder of <unk>, <s>, </s>.
inline bool WriteLlama2TokenizerConfig(const std::string& dir, bool legacy = false) {
  nlohmann::json decoder = nlohmann::json::object();
  const char* names[] = {"<unk>", "<s>", "</s>"};
  for (int id = 0; id < 3; ++id) {
    decoder[std::to_string(id)] = {{"content", names[id]}, {"lstrip", false},      {"normalized", false},
                                   {"rstrip", false},      {"single_word", false}, {"special", true}};
  }
  nlohmann::json config = {{"add_bos_token", true},
                           {"add_eos_token", false},
                           {"bos_token", "<s>"},
                           {"eos_token", "</s>"},
                           {"unk_token", "<unk>"},
                           {"legacy", legacy},
                           {"added_tokens_decoder", decoder},
                           {"chat_template", kLlama2Template},
                           {"tokenizer_class", "LlamaTokenizer"}};
  std::ofstream out(dir + "/tokenizer_config.json");
  out << config.dump(2);
  return static_cast<bool>(out);
}

}  // namespace strata::text::testing

#endif  // STRATA_TEXT_TESTING_TINY_SENTENCEPIECE_H_
