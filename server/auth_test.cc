#include "server/auth.h"

#include "gtest/gtest.h"

namespace strata::server {
namespace {

TEST(ApiKeysTest, ParsesEntriesByCommaOrLineWithAdminsAndComments) {
  auto keys = ApiKeys::Parse("# operators\nk-ops=ops:admin\n\nk-a=alpha, k-b=beta\n  k-c=gamma  \n");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 4u);
  EXPECT_EQ(keys->at("k-ops"), (ApiKey{"ops", true}));
  EXPECT_EQ(keys->at("k-a"), (ApiKey{"alpha", false}));
  EXPECT_EQ(keys->at("k-b"), (ApiKey{"beta", false}));
  EXPECT_EQ(keys->at("k-c"), (ApiKey{"gamma", false})) << "surrounding spaces are not part of an entry";
  EXPECT_TRUE(ApiKeys::Parse("").ok());
  EXPECT_TRUE(ApiKeys::Parse("")->empty());
}

TEST(ApiKeysTest, BadEntriesAreRefusedWithoutShowingTheKey) {
  for (const char* text : {"secret-key", "=tenant", "secret-key=", "secret-key=:admin", "a=x,a=y", "secret-key=a:b",
                           "secret-key=two words"}) {
    auto keys = ApiKeys::Parse(text);
    ASSERT_FALSE(keys.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(keys.status()));
    EXPECT_EQ(keys.status().message().find("secret-key"), std::string_view::npos) << keys.status();
  }
}

TEST(ApiKeysTest, ReplaceSwapsTheKeys) {
  ApiKeys keys(*ApiKeys::Parse("k1=alpha"));
  EXPECT_FALSE(keys.empty());
  EXPECT_EQ(keys.tenants(), std::vector<std::string>{"alpha"});
  keys.Replace(*ApiKeys::Parse("k2=beta:admin"));
  EXPECT_EQ(keys.tenants(), std::vector<std::string>{"beta"});
  keys.Replace({});
  EXPECT_TRUE(keys.empty());
}

}  // namespace
}  // namespace strata::server
