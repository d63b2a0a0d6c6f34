#include "engine/served_model.h"

#include "gtest/gtest.h"
#include "model/builtin/builtin_model.h"

namespace strata::engine {
namespace {

ServedModelOptions OnCpu(const std::string& model) {
  ServedModelOptions o;
  o.model = model;
  o.backend.device = "cpu";
  return o;
}

TEST(ServedModelTest, EmptyNameIsTheTrainedBuiltInModelWithItsByteTokenizer) {
  auto served = LoadServedModel(OnCpu(""));
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->backend->name(), "cpu");
  auto trained = model::BuiltinWeights();
  ASSERT_TRUE(trained.ok());
  EXPECT_EQ(served->backend->fingerprint(), trained->fingerprint());
  EXPECT_NE(served->description.find("trained"), std::string::npos) << served->description;
  auto text = served->tokenizer->RenderChat({{"user", "hi"}});
  ASSERT_TRUE(text.ok()) << "the built-in model chats in text: " << text.status();
}

TEST(ServedModelTest, RandomBuiltinIsTheSmallRandomModelWithTheSameTokenizer) {
  auto trained = LoadServedModel(OnCpu(""));
  auto random = LoadServedModel(OnCpu("random:builtin"));
  ASSERT_TRUE(trained.ok() && random.ok());
  EXPECT_NE(trained->backend->fingerprint(), random->backend->fingerprint());
  EXPECT_EQ(random->backend->config().CanonicalString(), model::ModelConfig::Builtin().CanonicalString());
  EXPECT_EQ(random->tokenizer->RenderChat({{"user", "hi"}}).value(),
            trained->tokenizer->RenderChat({{"user", "hi"}}).value());
}

TEST(ServedModelTest, SeedChangesTheRandomWeights) {
  ServedModelOptions a = OnCpu("random:builtin"), b = a;
  b.seed = a.seed + 1;
  auto ma = LoadServedModel(a), mb = LoadServedModel(b);
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_NE(ma->backend->fingerprint(), mb->backend->fingerprint());
}

TEST(ServedModelTest, UnknownShapeAndMissingDirectoryAreRefused) {
  auto unknown = LoadServedModel(OnCpu("random:gpt5"));
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status())) << unknown.status();
  EXPECT_NE(unknown.status().message().find("gpt5"), std::string::npos) << unknown.status();
  auto missing = LoadServedModel(OnCpu("/nonexistent/model/dir"));
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace strata::engine
