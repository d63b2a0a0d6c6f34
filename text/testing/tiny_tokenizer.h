// Hand-made tokenizer files for tests that must run without the network: a byte-level
// BPE tokenizer.json in the Qwen2 form (NFC, Qwen2's pre-tokenizer regex, ChatML special
// tokens) and a tokenizer_config.json with the ChatML template.
#ifndef STRATA_TEXT_TESTING_TINY_TOKENIZER_H_
#define STRATA_TEXT_TESTING_TINY_TOKENIZER_H_

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "text/testing/chat_templates.h"
#include "nlohmann/json.hpp"

namespace strata::text::testing {

// GPT-2's byte-to-unicode alphabet: the vocabulary spelling of byte `b` ("Ġ" for ' ').
inline std::string ByteLevelChar(int b) {
  int extra = 0, cp = -1;
  for (int x = 0; x < 256; ++x) {
    bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    int mapped = printable ? x : 256 + extra++;
    if (x == b) cp = mapped;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

inline constexpr char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Token IDs of the tiny tokenizer: bytes are 0..255, merges follow, then the specials.
inline constexpr int kTinyEndOfText = 300;
inline constexpr int kTinyImStart = 301;
inline constexpr int kTinyImEnd = 302;
inline constexpr int kTinyVocabSize = 303;

// tokenizer.json: bytes, a few merges ("he", "ll", "hello", " w", "or", " wor", ...),
// the three ChatML special tokens.
inline nlohmann::json TinyTokenizerJson() {
  using Json = nlohmann::json;
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(b)] = b;
  const std::string g = ByteLevelChar(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {g, "w"}, {"o", "r"}, {g + "w", "or"},
      {"s", "y"}, {"sy", "s"}, {"sys", "t"}, {"e", "m"}, {"syst", "em"}, {"u", "s"}, {"us", "er"},
      {"e", "r"}, {"a", "s"}, {"as", "s"}, {"i", "s"}, {"t", "a"}, {"n", "t"}, {"ass", "is"},
      {"assis", "ta"}, {"assista", "nt"}, {"Ċ", "Ċ"}, {g, "t"}, {g + "t", "he"}};
  Json m = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    m.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
  }
  Json j;
  j["added_tokens"] = Json::array({{{"id", kTinyEndOfText}, {"content", "<|endoftext|>"}, {"special", true}},
                                   {{"id", kTinyImStart}, {"content", "<|im_start|>"}, {"special", true}},
                                   {{"id", kTinyImEnd}, {"content", "<|im_end|>"}, {"special", true}}});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", Json::array({{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Pattern}}},
                                      {"behavior", "Isolated"}, {"invert", false}},
                                     {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}};
  return j;
}

// Writes tokenizer.json and tokenizer_config.json (ChatML template, eos <|im_end|>) into
// `dir`, which must exist. False if a file cannot be written.
inline bool WriteTinyChatMlTokenizer(const std::string& dir) {
  nlohmann::json config = {{"bos_token", nullptr}, {"eos_token", "<|im_end|>"}, {"chat_template", kChatMlTemplate}};
  std::ofstream t(dir + "/tokenizer.json"), c(dir + "/tokenizer_config.json");
  t << TinyTokenizerJson().dump();
  c << config.dump(2);
  return t.good() && c.good();
}

}  // namespace strata::text::testing

#endif  // STRATA_TEXT_TESTING_TINY_TOKENIZER_H_
