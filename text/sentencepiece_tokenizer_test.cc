// SentencePieceTokenizer and a tokenizer.model directory through LoadTokenizer, on a model
// trained here by the library's own spm_train and checked against its own spm_encode.
#include "text/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/testing/temp_dir.h"
#include "text/sentencepiece_model.h"
#include "text/testing/tiny_sentencepiece.h"
#include "text/testing/tiny_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_loader.h"

namespace strata::text {
namespace {

using testing::kTinySpmBos;
using testing::kTinySpmEos;
using testing::kTinySpmUnk;

// Single lines (spm_encode reads one text a line): spaces, leading and trailing spaces,
// digits, accents, CJK, emoji and other characters the corpus lacks (byte fallback).
const std::vector<std::string>& Corpus() {
  static const auto* corpus = new std::vector<std::string>{
      "Hello world",
      "hello world.",
      " Hello",
      "   three leading spaces",
      "trailing spaces   ",
      "double  space  between",
      "12345 and 3.14 and 2024",
      "Caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",  // 你好，世界
      "emoji \xF0\x9F\x99\x82 and \xF0\x9F\x9A\x80!",                  // 🙂 🚀
      "unseen \xCE\xA9 \xD0\xB6 \xE2\x82\xAC",                         // Ω ж €
      "mixed\ttab",
      "a",
      " ",
      "",
      "!!!???",
      "def f(x): return [x * 2 for x in range(10)]",
      "The quick brown fox jumps over the lazy dog.",
  };
  return *corpus;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The IDs spm_encode gives each line of `texts`.
std::vector<std::vector<int32_t>> SpmEncode(const std::string& dir, const std::vector<std::string>& texts) {
  {
    std::ofstream in(dir + "/spm-input.txt", std::ios::binary);
    for (const std::string& t : texts) in << t << "\n";
  }
  const std::string command = "spm_encode --model=" + dir + "/tokenizer.model --output_format=id --input=" + dir +
                              "/spm-input.txt --output=" + dir + "/spm-output.txt";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream out(dir + "/spm-output.txt");
  std::vector<std::vector<int32_t>> ids;
  for (std::string line; std::getline(out, line);) {
    std::istringstream fields(line);
    ids.emplace_back();
    for (int32_t id; fields >> id;) ids.back().push_back(id);
  }
  return ids;
}

// The text of `ids` as strata streams it: token bytes through the UTF-8 decoder, the first
// space dropped where the reference decoder drops it.
std::string Decode(const TokenVocabulary& t, const std::vector<int32_t>& ids) {
  Utf8StreamDecoder decoder;
  std::string text;
  for (int32_t id : ids) text += decoder.Feed(t.TokenBytes(id));
  text += decoder.Flush();
  if (t.drops_leading_space() && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why; !SentencePieceModel::Available(&why)) {
      GTEST_SKIP() << "the SentencePiece library is not available: " << why;
    }
    ASSERT_TRUE(testing::HaveSentencePieceTools())
        << "spm_train / spm_encode not found: install Debian's sentencepiece package (./dev installs it)";
    const std::string error = testing::TrainTinySentencePiece(dir_.path());
    ASSERT_EQ(error, "");
    model_bytes_ = ReadFile(dir_ / "tokenizer.model");
  }

  std::unique_ptr<SentencePieceTokenizer> Make(bool legacy, std::vector<SentencePieceAddedToken> added = {}) {
    SentencePieceOptions options;
    options.legacy = legacy;
    options.added_tokens = std::move(added);
    auto t = SentencePieceTokenizer::FromModel(model_bytes_, options);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }

  std::vector<int32_t> Encode(const TokenVocabulary& t, std::string_view text) {
    auto ids = t.Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  storage::testing::TempDir dir_{"strata-spm"};
  std::string model_bytes_;
};

TEST_F(SentencePieceTokenizerTest, EncodesAsTheLibrarysOwnCommandLine) {
  auto t = Make(/*legacy=*/true);
  ASSERT_NE(t, nullptr);
  const std::vector<std::vector<int32_t>> want = SpmEncode(dir_.path(), Corpus());
  ASSERT_EQ(want.size(), Corpus().size());
  for (size_t i = 0; i < Corpus().size(); ++i) {
    EXPECT_EQ(Encode(*t, Corpus()[i]), want[i]) << "'" << Corpus()[i] << "'";
  }
  // A transformers non-legacy tokenizer encodes a whole text the same way.
  auto non_legacy = Make(/*legacy=*/false);
  ASSERT_NE(non_legacy, nullptr);
  for (size_t i = 0; i < Corpus().size(); ++i) {
    EXPECT_EQ(Encode(*non_legacy, Corpus()[i]), want[i]) << "non-legacy: '" << Corpus()[i] << "'";
  }
}

TEST_F(SentencePieceTokenizerTest, DecodingGivesTheTextBack) {
  std::vector<std::string> texts = Corpus();
  texts.push_back("line one\nline two\n\n  indented\n");
  texts.push_back("\nstarts with a newline\r\n");
  for (bool legacy : {true, false}) {
    auto t = Make(legacy);
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(t->drops_leading_space());
    for (const std::string& text : texts) {
      EXPECT_EQ(Decode(*t, Encode(*t, text)), text) << (legacy ? "legacy" : "non-legacy");
    }
  }
}

TEST_F(SentencePieceTokenizerTest, CharactersTheModelLacksFallBackToBytes) {
  auto t = Make(/*legacy=*/true);
  ASSERT_NE(t, nullptr);
  const std::string emoji = "\xF0\x9F\x99\x82";
  const std::vector<int32_t> ids = Encode(*t, emoji);
  ASSERT_GE(ids.size(), 4u);
  std::string bytes;
  for (size_t i = ids.size() - 4; i < ids.size(); ++i) {
    EXPECT_EQ(t->TokenBytes(ids[i]).size(), 1u) << "token " << ids[i];
    bytes += t->TokenBytes(ids[i]);
  }
  EXPECT_EQ(bytes, emoji);
  // A character split across byte tokens streams out whole.
  Utf8StreamDecoder decoder;
  EXPECT_EQ(decoder.Feed(t->TokenBytes(ids[ids.size() - 4])), "");
  std::string streamed;
  for (size_t i = ids.size() - 3; i < ids.size(); ++i) streamed += decoder.Feed(t->TokenBytes(ids[i]));
  EXPECT_EQ(streamed, emoji);
  EXPECT_FALSE(t->Encode("bad \xFF utf-8").ok());
}

TEST_F(SentencePieceTokenizerTest, SpecialAndAddedTokensWrittenInTheTextAreCutOut) {
  const int pad = testing::kTinySpmVocab + 5;
  auto t = Make(/*legacy=*/true, {{"<pad>", pad, true}, {"<tool>", pad + 1, false}});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), pad + 2);
  std::vector<int32_t> want = {kTinySpmBos};
  for (int32_t id : Encode(*t, "hi")) want.push_back(id);
  want.push_back(kTinySpmEos);
  want.push_back(pad);
  EXPECT_EQ(Encode(*t, "<s>hi</s><pad>"), want);
  for (int32_t id : {kTinySpmUnk, kTinySpmBos, kTinySpmEos, pad}) {
    EXPECT_TRUE(t->IsSpecial(id)) << id;
    EXPECT_EQ(t->TokenBytes(id), "") << id;
  }
  EXPECT_FALSE(t->IsSpecial(pad + 1));
  EXPECT_EQ(t->TokenBytes(pad + 1), "<tool>");
  EXPECT_EQ(t->TokenId("</s>"), kTinySpmEos);
  EXPECT_EQ(t->TokenId("<tool>"), pad + 1);
  EXPECT_EQ(t->TokenId("no such piece"), std::nullopt);
  EXPECT_EQ(t->bos_piece(), "<s>");
  EXPECT_EQ(t->eos_piece(), "</s>");
}

// transformers' LlamaTokenizer(legacy=False), Llama 2's setting: "▁" only at the start of
// the text, so "[INST]" after <s> has no leading space; legacy gives every segment one.
TEST_F(SentencePieceTokenizerTest, NonLegacyPrefixesASpaceOnlyAtTheStartOfTheText) {
  auto legacy = Make(/*legacy=*/true);
  auto non_legacy = Make(/*legacy=*/false);
  ASSERT_NE(legacy, nullptr);
  ASSERT_NE(non_legacy, nullptr);
  const std::vector<int32_t> after = Encode(*non_legacy, "<s>Hello world");
  ASSERT_GE(after.size(), 2u);
  EXPECT_EQ(after[0], kTinySpmBos);
  EXPECT_EQ(non_legacy->TokenBytes(after[1]).substr(0, 1), "H");
  EXPECT_EQ(Decode(*non_legacy, {after.begin() + 1, after.end()}), "Hello world");
  const std::vector<int32_t> legacy_after = Encode(*legacy, "<s>Hello world");
  ASSERT_GE(legacy_after.size(), 2u);
  EXPECT_EQ(legacy->TokenBytes(legacy_after[1]).substr(0, 1), " ");
  // A written space after a special token is a word's space, as in the middle of a text.
  std::vector<int32_t> want = {kTinySpmBos};
  for (int32_t id : Encode(*legacy, "Hello world")) want.push_back(id);
  EXPECT_EQ(Encode(*non_legacy, "<s> Hello world"), want);
}

TEST_F(SentencePieceTokenizerTest, ACorruptModelIsInvalidArgument) {
  for (const std::string& bytes : {std::string("not a model"), model_bytes_.substr(0, model_bytes_.size() / 2)}) {
    auto t = SentencePieceTokenizer::FromModel(bytes, {});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  }
  std::ofstream(dir_ / "tokenizer.model", std::ios::binary) << "\x0a\x05garbage";
  auto loaded = LoadTokenizer(dir_.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find(dir_ / "tokenizer.model"), std::string::npos) << loaded.status();
}

TEST_F(SentencePieceTokenizerTest, ADirectoryWithOnlyTokenizerModelChatsWithTheLlama2Template) {
  ASSERT_TRUE(testing::WriteLlama2TokenizerConfig(dir_.path()));
  EXPECT_TRUE(HasTokenizerFile(dir_.path()));
  std::string note;
  auto t = LoadTokenizer(dir_.path(), &note);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(note.find("tokenizer.model"), std::string::npos) << note;
  EXPECT_NE(note.find("[INST]"), std::string::npos) << note;
  EXPECT_TRUE((*t)->IsStopToken(kTinySpmEos));
  EXPECT_FALSE((*t)->IsStopToken(kTinySpmBos));
  EXPECT_TRUE((*t)->DropsLeadingSpace());

  auto ids =
      (*t)->RenderChat({{"system", "be short"}, {"user", "hello"}, {"assistant", " hi there "}, {"user", "more"}});
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto want =
      (*t)->Encode("<s>[INST] <<SYS>>\nbe short\n<</SYS>>\n\nhello [/INST] hi there </s><s>[INST] more [/INST]");
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(*ids, *want);
  EXPECT_EQ(ids->front(), kTinySpmBos);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), kTinySpmBos), 2);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), kTinySpmEos), 1);
  // legacy false: "[INST]" right after <s> has no leading space.
  EXPECT_EQ((*t)->TokenBytes((*ids)[1]).substr(0, 1), "[");

  // The first turn's prompt is a prefix of the second's: the session cache can reuse it.
  auto first = (*t)->RenderChat({{"user", "hello"}});
  auto second = (*t)->RenderChat({{"user", "hello"}, {"assistant", "hi"}, {"user", "more"}});
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_LT(first->size(), second->size());
  EXPECT_TRUE(std::equal(first->begin(), first->end(), second->begin()));

  const std::vector<int32_t> silent = (*t)->SilentTokens();
  EXPECT_NE(std::find(silent.begin(), silent.end(), kTinySpmBos), silent.end());
  EXPECT_EQ(std::find(silent.begin(), silent.end(), kTinySpmEos), silent.end());
}

TEST_F(SentencePieceTokenizerTest, WithoutTokenizerConfigTheModelsOwnEosStopsAndChatIsRefused) {
  auto t = LoadTokenizer(dir_.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->IsStopToken(kTinySpmEos));
  EXPECT_EQ((*t)->RenderChat({{"user", "hi"}}).status().code(), absl::StatusCode::kInvalidArgument);
  auto ids = (*t)->Encode("Hello world");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, SpmEncode(dir_.path(), {"Hello world"}).at(0));
}

TEST_F(SentencePieceTokenizerTest, TokenizerJsonIsReadFirst) {
  ASSERT_TRUE(testing::WriteTinyChatMlTokenizer(dir_.path()));
  std::string note;
  auto t = LoadTokenizer(dir_.path(), &note);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), testing::kTinyVocabSize);
  EXPECT_EQ(note.rfind("tokenizer.json", 0), 0u) << note;
}

// Holds in both builds: with the library a tokenizer.model is read; without it the
// directory serves token IDs and the start-up line says why.
TEST(SentencePieceAvailabilityTest, TokenizerModelIsReadExactlyWhenTheLibraryIsAvailable) {
  storage::testing::TempDir dir("strata-spm");
  std::ofstream(dir / "tokenizer.model") << "x";
  EXPECT_EQ(HasTokenizerFile(dir.path()), SentencePieceModel::Available());
  if (!SentencePieceModel::Available()) {
    EXPECT_NE(MissingTokenizerReason(dir.path()).find("tokenizer.model is not read: "), std::string::npos);
    EXPECT_EQ(LoadTokenizer(dir.path()).status().code(), absl::StatusCode::kUnimplemented);
  }
  storage::testing::TempDir empty("strata-spm");
  EXPECT_FALSE(HasTokenizerFile(empty.path()));
  EXPECT_NE(MissingTokenizerReason(empty.path()).find("no tokenizer.json or tokenizer.model"), std::string::npos);
}

}  // namespace
}  // namespace strata::text
