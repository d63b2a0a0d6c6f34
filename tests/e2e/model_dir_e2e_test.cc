// `strata serve --model DIR` on a Hugging Face directory (written here from random
// weights, stored BF16): turns run on token_ids, the session cache reuses them, and the
// answers equal the cache-off server's. A broken or missing directory is refused at
// start.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/model_weights.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/chat_rpc.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using Turn = testing::ChatTurn;

Turn Chat(const std::string& target, const std::string& session, const std::vector<int32_t>& prompt,
          const std::string& message = "") {
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(8);
  for (int32_t t : prompt) r.add_token_ids(t);
  if (!message.empty()) {
    v1::Message* m = r.add_messages();
    m->set_role("user");
    m->set_content(message);
  }
  return testing::RunChat(target, r);
}

model::ModelConfig SmallQwen2() {
  model::ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.vocab_size = 512;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.max_context = 1024;
  c.rope_theta = 1e6f;
  c.qkv_bias = true;
  return c;
}

TEST(ModelDirE2eTest, ServesAModelDirectoryOnTokenIdsWithTheSessionCache) {
  storage::testing::TempDir dir("strata-model-e2e");
  const std::string model = dir.path() + "/qwen2-small";
  ASSERT_TRUE(model::ModelWeights::Random(SmallQwen2(), 3, {}).WriteDirectory(model, model::DType::kBF16).ok());
  auto on = testing::ServerProcess::Start({"--model=" + model, "--chunk_tokens=16", "--pin_host_memory=false"});
  ASSERT_TRUE(on.ok()) << on.status();
  auto off = testing::ServerProcess::Start({"--model=" + model, "--cache=off"});
  ASSERT_TRUE(off.ok()) << off.status();

  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 512);
  Turn first = Chat((*on)->target(), "s", prompt);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_FALSE(first.tokens.empty());
  EXPECT_EQ(first.done.usage().cached_tokens(), 0);

  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  for (int i = 0; i < 9; ++i) next.push_back((i * 53 + 7) % 512);
  Turn second = Chat((*on)->target(), "s", next);
  Turn reference = Chat((*off)->target(), "s", next);
  ASSERT_TRUE(second.status.ok() && reference.status.ok());
  EXPECT_EQ(second.done.usage().cached_tokens(), static_cast<int64_t>(prompt.size() + first.tokens.size()) - 1);
  EXPECT_EQ(second.done.usage().computed_tokens(), 9 + 1);
  EXPECT_EQ(second.tokens, reference.tokens) << "cached and recomputed answers differ";

  Turn text = Chat((*on)->target(), "t", {}, "hello");
  EXPECT_EQ(text.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(text.status.error_message().find("token_ids"), std::string::npos) << text.status.error_message();
}

TEST(ModelDirE2eTest, BrokenOrMissingDirectoryIsRefusedAtStart) {
  storage::testing::TempDir dir("strata-model-e2e");
  const std::string model = dir.path() + "/broken";
  ASSERT_TRUE(model::ModelWeights::Random(SmallQwen2(), 3, {}).WriteDirectory(model, model::DType::kF32, 2).ok());
  std::filesystem::remove(model + "/model-2-of-2.safetensors");
  auto server = testing::ServerProcess::Start({"--model=" + model});
  EXPECT_FALSE(server.ok());
  auto missing_dir = testing::ServerProcess::Start({"--model=" + dir.path() + "/nowhere"});
  EXPECT_FALSE(missing_dir.ok());
}

}  // namespace
}  // namespace strata
