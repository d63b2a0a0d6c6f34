// A session saved on a base (its KV follows a shared system prompt the session does not
// store itself): served only to a caller naming the same base, kept across a restart and
// across a fallback to the persisted version. And what the shared prompts' own sessions
// use: Touch, and the totals of an ID prefix.
#include <string>

#include "gtest/gtest.h"
#include "storage/session_index.h"
#include "storage/session_store.h"
#include "storage/testing/store_fixture.h"
#include "xxhash.h"

namespace strata::storage {
namespace {

TEST_F(SessionStoreTest, AMatchNeedsTheBaseTheSessionWasSavedOn) {
  MakeStore(16);
  const SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0, 0, "prompt-a").ok());
  EXPECT_EQ(store_->Match(key, Iota(12), 100, "prompt-a").tokens, 10);
  EXPECT_EQ(store_->Match(key, Iota(12), 100, "prompt-b").tokens, 0) << "KV that followed another prompt";
  EXPECT_EQ(store_->Match(key, Iota(12), 100).tokens, 0) << "KV that followed a prompt, asked for without";
  EXPECT_EQ(store_->Get(key)->base, "prompt-a");
  EXPECT_EQ(store_->Get(key)->cached_tokens, 10);
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "other"}).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"u", "s"}).status())) << "another tenant's";
  // Keeping tokens across a change of base would serve KV computed after the old one.
  EXPECT_TRUE(absl::IsInvalidArgument(SaveAll(key, Iota(12), 8, 0, "prompt-b")));
  EXPECT_EQ(store_->Match(key, Iota(12), 100, "prompt-a").tokens, 10) << "a refused save changed the session";
  ASSERT_TRUE(SaveAll(key, Iota(12), 0, 1, "").ok());
  EXPECT_EQ(store_->Match(key, Iota(12), 100).tokens, 12);
  EXPECT_EQ(store_->Match(key, Iota(12), 100, "prompt-a").tokens, 0);
  const SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.lookups, 6);
  EXPECT_EQ(st.hits, 3);
}

// Touch refreshes a session's place as a read would (a shared prompt read from KV memory),
// without counting a lookup; an unknown key is nothing.
TEST_F(SessionStoreTest, TouchKeepsASessionFromBeingTheLeastRecentlyUsed) {
  MakeStore(3);  // three one-chunk sessions fill the host tier
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(SaveAll({"t", id}, Iota(4), 0).ok());
  const int64_t before = store_->Get({"t", "a"})->last_access_unix_ms;
  store_->Touch({"t", "a"});
  store_->Touch({"t", "nobody"});
  EXPECT_GE(store_->Get({"t", "a"})->last_access_unix_ms, before);
  EXPECT_EQ(store_->Stats().lookups, 0) << "a touch is not a lookup";
  ASSERT_TRUE(SaveAll({"t", "d"}, Iota(4), 0).ok());  // room made by evicting one
  EXPECT_TRUE(store_->Get({"t", "a"}).ok()) << "the touched session was evicted";
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "b"}).status())) << "the least recently used stayed";
}

// Totals of the sessions whose ID starts with a prefix (the shared prompts' metrics).
TEST_F(SessionStoreTest, TotalsOfAnIdPrefix) {
  MakeStore(16);
  ASSERT_TRUE(SaveAll({"t", "\x01p/a"}, Iota(4), 0).ok());
  ASSERT_TRUE(SaveAll({"u", "\x01p/b"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"t", "plain"}, Iota(4), 0).ok());
  const SessionStore::IdPrefixTotals t = store_->TotalsOfIdPrefix("\x01p/");
  EXPECT_EQ(t.sessions, 2) << "every tenant's";
  EXPECT_EQ(t.on_host, 2);
  EXPECT_EQ(t.persisted, 0);
  EXPECT_EQ(t.bytes, 3 * store_->layout().BlockBytes());
  EXPECT_EQ(store_->TotalsOfIdPrefix("\x01q/").sessions, 0);
}

TEST_F(TieredStoreTest, TheBaseIsPersistedAndRecovered) {
  MakeTiered(16, 64);
  const SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(9), 0, 0, "sp:1234").ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  MakeTiered(16, 64);  // a restart
  auto info = store_->Get(key);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->base, "sp:1234");
  EXPECT_EQ(store_->Match(key, Iota(9), 100, "sp:1234").tokens, 9);
  EXPECT_EQ(store_->Match(key, Iota(9), 100).tokens, 0);
  EXPECT_EQ(ReadAndCheck(key, 9), 9);
}

// A newer version on another base that cannot be kept falls back to the persisted
// version together with that version's base.
TEST_F(TieredStoreTest, AFallbackToThePersistedVersionTakesItsBase) {
  MakeTiered(4, 64);
  const SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(8), 0, 0, "old").ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(SaveAll(key, Iota(40), 0, 0, "new"))) << "40 tokens: 10 chunks of 4";
  auto info = store_->Get(key);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->cached_tokens, 8);
  EXPECT_EQ(info->base, "old");
  EXPECT_EQ(store_->Match(key, Iota(8), 100, "old").tokens, 8);
  EXPECT_EQ(store_->Match(key, Iota(8), 100, "new").tokens, 0);
}

TEST(SessionRecordTest, RecordsOfVersionsOneAndTwoStillDecode) {
  SessionRecord r;
  r.tenant = "t";
  r.session_id = "s";
  r.model_fingerprint = 7;
  r.tokens = {1, 2, 3};
  r.base = "sp:9";
  r.generation = 42;
  r.chunks = {IndexedChunk{0, 4096, 3, 11}};
  auto back = DecodeSessionRecord(EncodeSessionRecord(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  // Earlier versions, as stores of earlier releases wrote them: version 1 (before bases)
  // is magic, version, tenant, id, fingerprint, access, expiry, tokens, chunks, checksum;
  // version 2 adds the base after the tokens; version 3 the generation after the base.
  r.generation = 0;
  const std::string v3 = EncodeSessionRecord(r);
  const size_t tokens_end = 4 + 4 + (4 + 1) + (4 + 1) + 8 + 8 + 8 + 4 + 3 * 4;
  const size_t base_end = tokens_end + 4 + r.base.size();
  // Takes `cut` bytes out at `at`, sets the version and re-seals.
  auto older = [&](uint32_t version, size_t at, size_t cut) {
    std::string out = v3.substr(0, at) + v3.substr(at + cut, v3.size() - at - cut - 8);
    out.replace(4, 4, reinterpret_cast<const char*>(&version), 4);
    const uint64_t sum = XXH3_64bits(out.data(), out.size());
    out.append(reinterpret_cast<const char*>(&sum), 8);
    return out;
  };
  auto v2 = DecodeSessionRecord(older(2, base_end, 8));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(*v2, r);
  r.base.clear();
  auto v1 = DecodeSessionRecord(older(1, tokens_end, 4 + 4 + 8));
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(*v1, r);
}

}  // namespace
}  // namespace strata::storage
