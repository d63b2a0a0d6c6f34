#include "storage/tenant_quota.h"

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

TEST(ParseByteCountTest, TakesDigitsAndBinarySuffixes) {
  EXPECT_EQ(*ParseByteCount("0"), 0);
  EXPECT_EQ(*ParseByteCount("4096"), 4096);
  EXPECT_EQ(*ParseByteCount("3KiB"), 3 << 10);
  EXPECT_EQ(*ParseByteCount("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteCount(" 8GiB "), int64_t{8} << 30);
  EXPECT_EQ(*ParseByteCount("2TiB"), int64_t{2} << 40);
}

TEST(ParseByteCountTest, RefusesWhatIsNotAByteCount) {
  for (const char* bad : {"", "GiB", "-1", "1.5GiB", "1GB", "12 MiB x", "99999999999TiB"}) {
    auto n = ParseByteCount(bad);
    EXPECT_FALSE(n.ok()) << "'" << bad << "' parsed as " << *n;
  }
}

TEST(ParseTenantQuotasTest, FieldsLeftOutKeepTheDefaults) {
  const TenantQuota defaults{.host_bytes = 100, .ssd_bytes = 200};
  auto q = ParseTenantQuotas("acme:host=1GiB,ssd=4GiB; globex:host=0 ;initech:ssd=7", defaults);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->size(), 3u);
  EXPECT_EQ(q->at("acme"), (TenantQuota{int64_t{1} << 30, int64_t{4} << 30}));
  EXPECT_EQ(q->at("globex"), (TenantQuota{0, 200})) << "host=0 lifts the host quota, the SSD one stays";
  EXPECT_EQ(q->at("initech"), (TenantQuota{100, 7}));
  EXPECT_TRUE(ParseTenantQuotas("", defaults)->empty());
  EXPECT_TRUE(ParseTenantQuotas(" ; ", defaults)->empty());
}

TEST(ParseTenantQuotasTest, BadEntriesAreNamedByPosition) {
  for (const char* bad :
       {"acme", ":host=1", "acme:disk=1", "acme:host", "acme:host=lots", "a:host=1;a:ssd=2", "acme:host=-5"}) {
    auto q = ParseTenantQuotas(bad, {});
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_NE(q.status().message().find("tenant quota entry"), absl::string_view::npos) << q.status();
  }
  auto second = ParseTenantQuotas("a:host=1;b:host=x", {});
  EXPECT_NE(second.status().message().find("entry 2"), absl::string_view::npos) << second.status();
}

}  // namespace
}  // namespace strata::storage
