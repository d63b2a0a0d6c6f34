#include "text/bpe_tokenizer.h"

#include <string>
#include <vector>

#include "text/testing/tiny_tokenizer.h"
#include "text/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata::text {
namespace {

using Json = nlohmann::json;

using testing::ByteLevelChar;

// A byte-level tokenizer.json: bytes 0..255 are IDs 0..255 (spelled in the byte-level
// alphabet), then each merge's result in order, then one special token <|end|> = 400.
Json ByteLevelJson(const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges = false) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(b)] = b;
  Json m = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    m.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
  }
  Json j;
  j["added_tokens"] = Json::array({{{"id", 400}, {"content", "<|end|>"}, {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         Json::array({{{"type", "Split"},
                                       {"pattern", {{"Regex", R"( ?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+)"}}},
                                       {"behavior", "Isolated"},
                                       {"invert", false}},
                                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", ignore_merges}};
  return j;
}

std::unique_ptr<BpeTokenizer> Load(const Json& j) {
  auto t = BpeTokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

std::vector<int32_t> Encode(const BpeTokenizer& t, std::string_view text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

const std::string kG = ByteLevelChar(' ');  // "Ġ"

TEST(BpeTokenizerTest, ByteLevelMergesByRankWithinEachPreTokenizedPiece) {
  auto t = Load(ByteLevelJson(
      {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {kG, "w"}, {"o", "r"}, {kG + "w", "or"}}));
  ASSERT_NE(t, nullptr);
  const int32_t hello = *t->TokenId("hello"), gwor = *t->TokenId(kG + "wor");
  // "hello" | " world" | "!": the merges never cross a piece boundary.
  EXPECT_EQ(Encode(*t, "hello world!"), (std::vector<int32_t>{hello, gwor, 'l', 'd', '!'}));
  EXPECT_EQ(t->TokenBytes(gwor), " wor");
  EXPECT_EQ(t->vocab_size(), 401);
}

TEST(BpeTokenizerTest, EqualRanksMergeLeftmostFirst) {
  auto t = Load(ByteLevelJson({{"a", "a"}}));
  ASSERT_NE(t, nullptr);
  const int32_t aa = *t->TokenId("aa");
  EXPECT_EQ(Encode(*t, "aaa"), (std::vector<int32_t>{aa, 'a'}));
  EXPECT_EQ(Encode(*t, "aaaa"), (std::vector<int32_t>{aa, aa}));
}

TEST(BpeTokenizerTest, RegexSplitsDigitsInThreesAndKeepsWhitespaceRuns) {
  auto t = Load(ByteLevelJson({{"1", "2"}, {"12", "3"}, {"4", "5"}}));
  ASSERT_NE(t, nullptr);
  // "12345" -> "123" "45"; "  \n\t" is one whitespace piece of four bytes.
  EXPECT_EQ(Encode(*t, "12345  \n\t"),
            (std::vector<int32_t>{*t->TokenId("123"), *t->TokenId("45"), ' ', ' ', '\n', '\t'}));
}

TEST(BpeTokenizerTest, AddedTokensAreCutOutBeforeMergingAndDecodeToNothing) {
  auto t = Load(ByteLevelJson({{"h", "i"}}));
  ASSERT_NE(t, nullptr);
  const int32_t hi = *t->TokenId("hi");
  EXPECT_EQ(Encode(*t, "hi<|end|>hi<|end"), (std::vector<int32_t>{hi, 400, hi, '<', '|', 'e', 'n', 'd'}));
  EXPECT_TRUE(t->IsSpecial(400));
  EXPECT_FALSE(t->IsSpecial(hi));
  EXPECT_EQ(t->TokenBytes(400), "");
}

TEST(BpeTokenizerTest, IgnoreMergesTakesAWholePieceFoundInTheVocabulary) {
  Json j = ByteLevelJson({{"x", "y"}}, /*ignore_merges=*/true);
  j["model"]["vocab"]["xyz"] = 390;  // reachable by no merge
  auto with = Load(j);
  j["model"]["ignore_merges"] = false;
  auto without = Load(j);
  ASSERT_NE(with, nullptr);
  ASSERT_NE(without, nullptr);
  EXPECT_EQ(Encode(*with, "xyz"), (std::vector<int32_t>{390}));
  EXPECT_EQ(Encode(*without, "xyz"), (std::vector<int32_t>{*without->TokenId("xy"), 'z'}));
}

TEST(BpeTokenizerTest, MultiByteCharactersMergeFromTheirBytes) {
  // 日 is E6 97 A5: two merges make it one token; 本 (E6 9C AC) stays three bytes.
  const std::string e6 = ByteLevelChar(0xE6), x97 = ByteLevelChar(0x97), xa5 = ByteLevelChar(0xA5);
  auto t = Load(ByteLevelJson({{e6, x97}, {e6 + x97, xa5}}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "日本"), (std::vector<int32_t>{*t->TokenId(e6 + x97 + xa5), 0xE6, 0x9C, 0xAC}));
  EXPECT_EQ(t->TokenBytes(*t->TokenId(e6 + x97 + xa5)), "日");
}

// Llama 2 / Mistral style: ▁ for spaces, merges over characters, <0xXX> byte fallback.
Json SentencePieceJson(bool metaspace) {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const char* piece : {"▁", "h", "i", "▁h", "▁hi", "!", "é"}) vocab[piece] = next++;
  Json j;
  j["added_tokens"] = Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                   {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  if (metaspace) {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  } else {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                                                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}};
    j["pre_tokenizer"] = nullptr;
  }
  j["model"] = {{"type", "BPE"},   {"vocab", vocab},  {"merges", Json::array({"▁ h", "▁h i"})},
                {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}};
  return j;
}

TEST(BpeTokenizerTest, SentencePieceStyleFallsBackToBytesForUnknownCharacters) {
  auto t = Load(SentencePieceJson(/*metaspace=*/false));
  ASSERT_NE(t, nullptr);
  const int32_t hi = *t->TokenId("▁hi"), space = *t->TokenId("▁");
  // "hi 日!" -> ▁hi ▁ <E6> <97> <A5> !; each segment after an added token gets its own ▁.
  EXPECT_EQ(Encode(*t, "hi 日!"), (std::vector<int32_t>{hi, space, 3 + 0xE6, 3 + 0x97, 3 + 0xA5, *t->TokenId("!")}));
  EXPECT_EQ(Encode(*t, "hi</s>hi"), (std::vector<int32_t>{hi, 2, hi}));
  EXPECT_EQ(t->TokenBytes(hi), " hi");
  EXPECT_EQ(t->TokenBytes(3 + 0xE6), "\xE6");
  // Streaming: the byte tokens of 日 come out as one character once the last arrives.
  Utf8StreamDecoder decoder;
  std::string text;
  for (int32_t id : Encode(*t, "hi 日!")) text += decoder.Feed(t->TokenBytes(id));
  EXPECT_EQ(text + decoder.Flush(), " hi 日!");
}

TEST(BpeTokenizerTest, MetaspacePrependsOnlyAtTheStartOfTheInput) {
  auto t = Load(SentencePieceJson(/*metaspace=*/true));
  ASSERT_NE(t, nullptr);
  const int32_t hi = *t->TokenId("▁hi"), h = *t->TokenId("h"), i = *t->TokenId("i");
  EXPECT_EQ(Encode(*t, "hi</s>hi"), (std::vector<int32_t>{hi, 2, h, i}));
}

// The reference decoders strip the space a SentencePiece text starts with (Llama 2's
// `Strip` step, Metaspace with a prepend scheme); byte-level decoders keep it.
TEST(BpeTokenizerTest, SentencePieceDecodersDropTheLeadingSpace) {
  Json strip = SentencePieceJson(/*metaspace=*/false);
  strip["decoder"] = {{"type", "Sequence"},
                      {"decoders", Json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                                {{"type", "ByteFallback"}},
                                                {{"type", "Fuse"}},
                                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  EXPECT_TRUE(Load(strip)->drops_leading_space());
  Json metaspace = SentencePieceJson(/*metaspace=*/true);
  metaspace["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  EXPECT_TRUE(Load(metaspace)->drops_leading_space());
  metaspace["decoder"]["prepend_scheme"] = "never";
  EXPECT_FALSE(Load(metaspace)->drops_leading_space());
  Json byte_level = ByteLevelJson({});
  byte_level["decoder"] = {{"type", "ByteLevel"}};
  EXPECT_FALSE(Load(byte_level)->drops_leading_space());
}

TEST(BpeTokenizerTest, RefusesWhatItDoesNotImplementAndBadInput) {
  Json j = ByteLevelJson({});
  j["normalizer"] = {{"type", "NFKD"}};
  auto nfkd = BpeTokenizer::FromJson(j.dump());
  EXPECT_TRUE(absl::IsInvalidArgument(nfkd.status()));
  EXPECT_NE(nfkd.status().message().find("NFKD"), std::string::npos) << nfkd.status();
  j = ByteLevelJson({});
  j["model"]["type"] = "Unigram";
  EXPECT_TRUE(absl::IsInvalidArgument(BpeTokenizer::FromJson(j.dump()).status()));
  j = ByteLevelJson({});
  j["model"]["merges"].push_back("q zz");  // "zz" is not in the vocabulary
  EXPECT_TRUE(absl::IsInvalidArgument(BpeTokenizer::FromJson(j.dump()).status()));
  j = ByteLevelJson({});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_TRUE(absl::IsInvalidArgument(BpeTokenizer::FromJson(j.dump()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(BpeTokenizer::FromJson("not json").status()));

  auto t = Load(ByteLevelJson({}));
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(t->Encode("ok \xff").status()));
  EXPECT_EQ(Encode(*t, ""), std::vector<int32_t>{});
}

}  // namespace
}  // namespace strata::text
