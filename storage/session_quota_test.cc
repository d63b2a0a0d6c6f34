// Tenant quotas in the store (tenant_quota.h): a tenant over its quota of a tier makes
// room among its own sessions only, never another tenant's; what its own cannot make room
// for is refused (host) or stays host-only (SSD), and nothing of anyone else moves.
#include <map>
#include <string>

#include "absl/time/time.h"
#include "base/metrics.h"
#include "gtest/gtest.h"
#include "storage/session_store_metrics.h"
#include "storage/testing/store_fixture.h"

namespace strata::storage {
namespace {

// The fixtures' layout: 4 tokens a chunk.
int64_t Block() { return ChunkLayout{.layers = 2, .chunk_tokens = 4, .row_bytes = 8}.BlockBytes(); }

// Quotas in chunks.
TenantQuota Chunks(int64_t host, int64_t ssd = 0) { return TenantQuota{host * Block(), ssd * Block()}; }

class HostQuotaTest : public SessionStoreTest {
 protected:
  void MakeQuotaStore(int64_t host_chunks, const TenantQuota& every_tenant,
                      std::map<std::string, TenantQuota> overrides = {}) {
    SessionStoreOptions o;
    o.layout = ChunkLayout{.layers = 2, .chunk_tokens = 4, .row_bytes = 8};
    o.host_capacity_bytes = host_chunks * o.layout.BlockBytes();
    o.model_fingerprint = kFingerprint;
    o.tenant_quota = every_tenant;
    o.tenant_quotas = std::move(overrides);
    auto s = SessionStore::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  // Whether the session is stored with all of its `tokens` and serves them.
  bool Holds(const SessionKey& key, int tokens) {
    return store_->Get(key).ok() && store_->Match(key, Iota(tokens), tokens).tokens == tokens;
  }
};

TEST_F(HostQuotaTest, ATenantOverItsHostQuotaEvictsOnlyItsOwnSessionsLeastRecentlyUsedFirst) {
  MakeQuotaStore(32, Chunks(4));  // the tier has room for all: only the quota pushes
  ASSERT_TRUE(SaveAll({"b", "b1"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"b", "b2"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"a", "a1"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"a", "a2"}, Iota(8), 0).ok());
  ASSERT_TRUE(Holds({"a", "a1"}, 8));  // a1 is now a's most recently used
  ASSERT_TRUE(SaveAll({"a", "a3"}, Iota(8), 0).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"a", "a2"}).status())) << "a's least recently used session goes";
  EXPECT_TRUE(Holds({"a", "a1"}, 8));
  EXPECT_TRUE(Holds({"a", "a3"}, 8));
  EXPECT_TRUE(Holds({"b", "b1"}, 8));
  EXPECT_TRUE(Holds({"b", "b2"}, 8));
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.quota_evictions_host, 1);
  EXPECT_EQ(st.evictions_host_quota, 1);
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(st.evictions_host_full, 0);
  SessionStoreStats a = store_->TenantStats("a");
  EXPECT_EQ(a.host_used_bytes, 4 * Block());
  EXPECT_EQ(a.host_quota_bytes, 4 * Block());
  EXPECT_EQ(a.quota_evictions_host, 1);
  EXPECT_EQ(store_->TenantStats("b").quota_evictions_host, 0);

  // A flood of a's sessions: b's stay, every one of them served.
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(SaveAll({"a", "flood" + std::to_string(i)}, Iota(8), 0).ok());
  EXPECT_TRUE(Holds({"b", "b1"}, 8));
  EXPECT_TRUE(Holds({"b", "b2"}, 8));
  EXPECT_EQ(store_->TenantStats("a").host_used_bytes, 4 * Block());
  EXPECT_EQ(store_->TenantStats("b").evictions, 0);
  EXPECT_EQ(HostBlocksUsed(), 8);
}

TEST_F(HostQuotaTest, ASessionLargerThanItsTenantsHostQuotaIsRefusedAndNothingElseMoves) {
  MakeQuotaStore(32, Chunks(2));
  ASSERT_TRUE(SaveAll({"a", "small"}, Iota(4), 0).ok());
  ASSERT_TRUE(SaveAll({"b", "b1"}, Iota(8), 0).ok());
  const absl::Status big = SaveAll({"a", "big"}, Iota(12), 0);
  ASSERT_TRUE(absl::IsResourceExhausted(big)) << big;
  EXPECT_NE(big.message().find("host quota"), absl::string_view::npos) << big;
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"a", "big"}).status()));
  EXPECT_TRUE(Holds({"a", "small"}, 4)) << "nothing of a's is evicted for a save that cannot fit anyway";
  EXPECT_TRUE(Holds({"b", "b1"}, 8));
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.quota_refused_host, 1);
  EXPECT_EQ(st.save_rejected, 1);
  EXPECT_EQ(st.evictions, 0);
  EXPECT_EQ(store_->TenantStats("a").quota_refused_host, 1);
  EXPECT_EQ(store_->TenantStats("b").quota_refused_host, 0);
}

// Quotas that overcommit the tier: within its quota a tenant meets the tier's own placement.
TEST_F(HostQuotaTest, ATenantWithinItsQuotaMeetsTheTiersPolicyWhenTheTierIsFull) {
  MakeQuotaStore(8, Chunks(6));
  ASSERT_TRUE(SaveAll({"b", "b1"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"b", "b2"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"b", "b3"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"a", "a1"}, Iota(8), 0).ok());  // the tier is full
  ASSERT_TRUE(SaveAll({"a", "a2"}, Iota(8), 0).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"b", "b1"}).status())) << "the tier's least recently used";
  EXPECT_EQ(store_->Stats().evictions_host_full, 1);
  EXPECT_EQ(store_->Stats().quota_evictions_host, 0);
}

TEST_F(HostQuotaTest, ATenantsOwnQuotaReplacesTheDefault) {
  MakeQuotaStore(32, Chunks(2), {{"big", Chunks(0)}});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SaveAll({"big", "s" + std::to_string(i)}, Iota(8), 0).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Holds({"big", "s" + std::to_string(i)}, 8)) << "no quota for 'big'";
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SaveAll({"small", "s" + std::to_string(i)}, Iota(8), 0).ok());
  EXPECT_EQ(store_->TenantStats("small").host_used_bytes, 2 * Block());
  EXPECT_EQ(store_->TenantStats("big").host_quota_bytes, 0);
}

TEST(TenantQuotaOptionsTest, AQuotaThatHoldsNoChunkIsRefused) {
  SessionStoreOptions o;
  o.layout = ChunkLayout{.layers = 2, .chunk_tokens = 4, .row_bytes = 8};
  o.host_capacity_bytes = 16 * o.layout.BlockBytes();
  o.tenant_quota.host_bytes = o.layout.BlockBytes() - 1;
  EXPECT_TRUE(absl::IsInvalidArgument(o.Validate()));
  o.tenant_quota.host_bytes = 0;
  o.tenant_quotas["acme"].ssd_bytes = -1;
  const absl::Status bad = o.Validate();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_NE(bad.message().find("acme"), absl::string_view::npos) << bad;
  o.tenant_quotas["acme"].ssd_bytes = o.layout.BlockBytes();
  EXPECT_TRUE(o.Validate().ok());
}

class SsdQuotaTest : public TieredStoreTest {
 protected:
  void MakeWithQuota(int64_t host_chunks, int64_t ssd_chunks, const TenantQuota& every_tenant) {
    tweak_ = [every_tenant](SessionStoreOptions& o) { o.tenant_quota = every_tenant; };
    MakeTiered(host_chunks, ssd_chunks);
  }
  void SaveAndFlush(const SessionKey& key, int tokens) {
    ASSERT_TRUE(SaveAll(key, Iota(tokens), 0).ok());
    const absl::Status flushed = store_->Flush(key, absl::Seconds(10));
    ASSERT_TRUE(flushed.ok()) << key.tenant << "/" << key.session_id << ": " << flushed;
  }
  Tier TierOf(const SessionKey& key) {
    auto info = store_->Get(key);
    return info.ok() ? info->tier : Tier::kNone;
  }
};

TEST_F(SsdQuotaTest, APromotionWithinAHostQuotaDemotesOnlyTheTenantsOwnSessions) {
  MakeWithQuota(16, 64, Chunks(2));
  SaveAndFlush({"a", "a1"}, 8);
  SaveAndFlush({"b", "b1"}, 8);
  SaveAndFlush({"a", "a2"}, 8);  // a1 is demoted for a's quota
  EXPECT_EQ(TierOf({"a", "a1"}), Tier::kSsd);
  EXPECT_EQ(ReadAndCheck({"a", "a1"}, 8), 8);  // promoted: a2 is demoted for it
  EXPECT_EQ(TierOf({"a", "a1"}), Tier::kHost);
  EXPECT_EQ(TierOf({"a", "a2"}), Tier::kSsd);
  EXPECT_EQ(TierOf({"b", "b1"}), Tier::kHost);
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.quota_evictions_host, 2);
  EXPECT_EQ(st.demotions, 2);
  EXPECT_EQ(st.evictions, 0);
  EXPECT_EQ(st.persisted_deleted, 0);
}

TEST_F(SsdQuotaTest, APrefetchWithinAHostQuotaTakesOnlyTheTenantsOwnRoomAndOnlyWhenItFits) {
  MakeWithQuota(16, 64, Chunks(2));
  SaveAndFlush({"a", "a1"}, 8);
  SaveAndFlush({"b", "b1"}, 8);
  SaveAndFlush({"a", "a2"}, 8);  // a1 demoted
  ASSERT_EQ(TierOf({"a", "a1"}), Tier::kSsd);
  // a1 comes next: a2 (outside the look-ahead) is demoted for it, b1 stays.
  store_->SetLookAhead({{"a", "a1"}});
  for (int i = 0; i < 200 && TierOf({"a", "a1"}) != Tier::kHost; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(TierOf({"a", "a1"}), Tier::kHost);
  EXPECT_EQ(TierOf({"a", "a2"}), Tier::kSsd);
  EXPECT_EQ(TierOf({"b", "b1"}), Tier::kHost);
  // Both of a's queued: a2's prefetch would have to take queued a1 within a's quota, so it
  // does not start, and nothing of b's is taken instead.
  store_->SetLookAhead({{"a", "a1"}, {"a", "a2"}});
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(TierOf({"a", "a1"}), Tier::kHost);
  EXPECT_EQ(TierOf({"a", "a2"}), Tier::kSsd);
  EXPECT_EQ(TierOf({"b", "b1"}), Tier::kHost);
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.prefetches, 1);
  EXPECT_EQ(st.quota_refused_host, 0) << "a prefetch that does not start is not a refusal";
  EXPECT_EQ(st.persisted_deleted, 0);
}

TEST_F(SsdQuotaTest, ATenantOverItsSsdQuotaDeletesOnlyItsOwnSsdOnlySessionsAndSaysSoOnce) {
  MakeWithQuota(16, 64, Chunks(2, 4));
  SaveAndFlush({"a", "a1"}, 8);
  SaveAndFlush({"b", "b1"}, 8);
  SaveAndFlush({"a", "a2"}, 8);  // a1 demoted (host quota); a holds 4 SSD chunks
  SaveAndFlush({"a", "a3"}, 8);  // a2 demoted; a1's persisted copy deleted for a's SSD quota
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"a", "a1"}).status()));
  EXPECT_EQ(TierOf({"a", "a2"}), Tier::kSsd);
  EXPECT_EQ(TierOf({"a", "a3"}), Tier::kHost);
  ASSERT_TRUE(store_->Get({"b", "b1"}).ok());
  EXPECT_TRUE(store_->Get({"b", "b1"})->persisted);
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.persisted_deleted, 1);
  EXPECT_EQ(st.quota_evictions_ssd, 1);
  EXPECT_EQ(st.evictions_ssd_quota, 1);
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(store_->TenantStats("a").ssd_used_bytes, 4 * Block());
  EXPECT_EQ(store_->TenantStats("a").ssd_quota_bytes, 4 * Block());
  EXPECT_EQ(store_->TenantStats("b").evictions, 0);
  // The deletion is for good, and nothing else is lost, across a restart.
  ASSERT_TRUE(store_->AwaitWriteBacks(absl::Seconds(10)).ok());
  MakeTiered(16, 64);
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"a", "a1"}).status()));
  EXPECT_EQ(ReadAndCheck({"a", "a2"}, 8), 8);
  EXPECT_EQ(ReadAndCheck({"a", "a3"}, 8), 8);
  EXPECT_EQ(ReadAndCheck({"b", "b1"}, 8), 8);
}

TEST_F(SsdQuotaTest, ASessionLargerThanItsTenantsSsdQuotaStaysHostOnlyAndNothingIsDeleted) {
  MakeWithQuota(32, 64, Chunks(0, 2));
  SaveAndFlush({"a", "small"}, 4);
  SaveAndFlush({"b", "b1"}, 8);
  ASSERT_TRUE(SaveAll({"a", "big"}, Iota(12), 0).ok());
  const absl::Status flushed = store_->Flush({"a", "big"}, absl::Seconds(10));
  EXPECT_TRUE(absl::IsResourceExhausted(flushed)) << flushed;
  EXPECT_NE(flushed.message().find("SSD quota"), absl::string_view::npos) << flushed;
  auto big = store_->Get({"a", "big"});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->tier, Tier::kHost);
  EXPECT_FALSE(big->persisted);
  EXPECT_EQ(ReadAndCheck({"a", "big"}, 12), 12) << "still served from host";
  EXPECT_TRUE(store_->Get({"a", "small"})->persisted);
  EXPECT_TRUE(store_->Get({"b", "b1"})->persisted);
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.quota_refused_ssd, 1);
  EXPECT_EQ(st.persisted_deleted, 0);
  EXPECT_EQ(st.evictions, 0);
}

// Quotas that fit the tiers: one tenant's flood neither demotes nor deletes anything of
// another's; every persisted version deleted is the flooding tenant's own.
TEST_F(SsdQuotaTest, AFloodNeverTouchesAnotherTenantsSessions) {
  MakeWithQuota(8, 24, Chunks(4, 8));
  SaveAndFlush({"b", "b1"}, 8);
  SaveAndFlush({"b", "b2"}, 8);
  for (int i = 0; i < 30; ++i) SaveAndFlush({"a", "flood" + std::to_string(i)}, 8);
  for (const char* id : {"b1", "b2"}) {
    auto info = store_->Get({"b", id});
    ASSERT_TRUE(info.ok()) << id;
    EXPECT_TRUE(info->persisted) << id;
    EXPECT_EQ(info->tier, Tier::kHost) << id << " was demoted";
    EXPECT_EQ(ReadAndCheck({"b", id}, 8), 8);
  }
  SessionStoreStats st = store_->Stats();
  EXPECT_GT(st.quota_evictions_ssd, 0);
  EXPECT_EQ(st.persisted_deleted, st.quota_evictions_ssd) << "every deletion was for a's quota";
  EXPECT_EQ(st.evictions_host_full + st.evictions_ssd_full, 0);
  EXPECT_EQ(store_->TenantStats("b").evictions, 0);
  EXPECT_LE(store_->TenantStats("a").ssd_used_bytes, 8 * Block());
  EXPECT_LE(store_->TenantStats("a").host_used_bytes, 4 * Block());
}

TEST_F(HostQuotaTest, PerTenantQuotaSeriesOnlyWithTheTenantLabel) {
  MakeQuotaStore(32, Chunks(2));
  ASSERT_TRUE(SaveAll({"a", "a1"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"a", "a2"}, Iota(8), 0).ok());
  metrics::Registry plain;
  ExportSessionStoreMetrics(plain, store_.get(), true);
  const std::string text = plain.Serialize();
  EXPECT_NE(text.find("strata_cache_quota_evictions_total{tier=\"host\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_cache_evictions_total{reason=\"host_quota\"} 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("strata_tenant_"), std::string::npos) << text;
  metrics::Registry labelled;
  ExportSessionStoreMetrics(labelled, store_.get(), true, [] { return std::vector<std::string>{"a", "b"}; });
  const std::string per_tenant = labelled.Serialize();
  EXPECT_NE(per_tenant.find("strata_tenant_cache_bytes{tenant=\"a\",tier=\"host\"} " + std::to_string(2 * Block())),
            std::string::npos)
      << per_tenant;
  EXPECT_NE(
      per_tenant.find("strata_tenant_cache_quota_bytes{tenant=\"b\",tier=\"host\"} " + std::to_string(2 * Block())),
      std::string::npos)
      << per_tenant;
  EXPECT_NE(per_tenant.find("strata_tenant_cache_quota_evictions_total{tenant=\"a\",tier=\"host\"} 1"),
            std::string::npos)
      << per_tenant;
}

}  // namespace
}  // namespace strata::storage
