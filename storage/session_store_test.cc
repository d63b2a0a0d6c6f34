#include "storage/session_store.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

constexpr uint64_t kFingerprint = 0xfeed;

// Fake KV: the row of token t, layer l, K/V kv is filled with the byte (t*3 + l*5 + kv) & 0xff.
std::byte RowByte(int64_t token, int layer, int kv) {
  return static_cast<std::byte>((token * 3 + layer * 5 + kv) & 0xff);
}

class SessionStoreTest : public ::testing::Test {
 protected:
  void MakeStore(int64_t chunks_capacity) {
    SessionStoreOptions o;
    o.layout = ChunkLayout{.layers = 2, .chunk_tokens = 4, .row_bytes = 8};
    o.host_capacity_bytes = chunks_capacity * o.layout.BlockBytes();
    o.model_fingerprint = kFingerprint;
    auto s = SessionStore::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }

  absl::Status SaveAll(const SessionKey& key, const std::vector<int32_t>& tokens, int64_t keep) {
    const ChunkLayout& layout = store_->layout();
    return store_->Save(key, tokens, keep, [&](int64_t begin, int count, absl::Span<std::byte> p) {
      for (int i = 0; i < count; ++i)
        for (int l = 0; l < layout.layers; ++l)
          for (int kv = 0; kv < 2; ++kv)
            std::memset(p.data() + layout.RowOffset(l, kv, i), static_cast<int>(RowByte(begin + i, l, kv)),
                        static_cast<size_t>(layout.row_bytes));
    });
  }

  // Reads `n` tokens and checks every row holds the bytes SaveAll wrote.
  int64_t ReadAndCheck(const SessionKey& key, int64_t n) {
    const ChunkLayout& layout = store_->layout();
    int64_t next = 0;
    auto got = store_->Read(key, n, [&](int64_t begin, int count, absl::Span<const std::byte> p) {
      EXPECT_EQ(begin, next);
      for (int i = 0; i < count; ++i)
        for (int l = 0; l < layout.layers; ++l)
          for (int kv = 0; kv < 2; ++kv)
            EXPECT_EQ(p[layout.RowOffset(l, kv, i)], RowByte(begin + i, l, kv))
                << "token " << begin + i << " layer " << l << " kv " << kv;
      next = begin + count;
    });
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : -1;
  }

  std::unique_ptr<SessionStore> store_;
};

std::vector<int32_t> Iota(int n, int start = 100) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST_F(SessionStoreTest, MatchesLongestStoredPrefix) {
  MakeStore(16);
  SessionKey key{"t", "s1"};
  auto tokens = Iota(10);
  ASSERT_TRUE(SaveAll(key, tokens, 0).ok());
  auto longer = Iota(14);
  PrefixMatch m = store_->Match(key, longer, 100);
  EXPECT_EQ(m.tokens, 10);
  EXPECT_EQ(m.tier, Tier::kHost);
  EXPECT_EQ(store_->Match(key, longer, 7).tokens, 7);  // capped
  auto edited = longer;
  edited[6] = 1;
  EXPECT_EQ(store_->Match(key, edited, 100).tokens, 6);
  EXPECT_EQ(ReadAndCheck(key, 10), 10);
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.lookups, 3);
  EXPECT_EQ(st.hits, 3);
}

TEST_F(SessionStoreTest, TenantsDoNotSeeEachOther) {
  MakeStore(16);
  ASSERT_TRUE(SaveAll({"a", "s"}, Iota(5), 0).ok());
  EXPECT_EQ(store_->Match({"b", "s"}, Iota(5), 100).tokens, 0);
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"b", "s"}).status()));
  EXPECT_EQ(store_->List("b").size(), 0u);
  EXPECT_EQ(store_->List("a").size(), 1u);
}

TEST_F(SessionStoreTest, AppendKeepsWholeChunksAndRewritesTheRest) {
  MakeStore(16);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(6), 0).ok());
  ASSERT_TRUE(SaveAll(key, Iota(11), 6).ok());
  auto info = store_->Get(key);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->cached_tokens, 11);
  EXPECT_EQ(info->chunks, 3);
  EXPECT_EQ(ReadAndCheck(key, 11), 11);
  EXPECT_EQ(store_->Stats().host_used_bytes, 3 * store_->layout().BlockBytes());
}

TEST_F(SessionStoreTest, EditedHistoryReplacesTail) {
  MakeStore(16);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(12), 0).ok());
  auto edited = Iota(9);
  edited[5] = 7;
  ASSERT_TRUE(SaveAll(key, edited, 5).ok());
  EXPECT_EQ(store_->Get(key)->cached_tokens, 9);
  EXPECT_EQ(store_->Match(key, edited, 100).tokens, 9);
  EXPECT_EQ(store_->Stats().host_used_bytes, 3 * store_->layout().BlockBytes());
}

TEST_F(SessionStoreTest, EvictsLeastRecentlyUsedWholeSessions) {
  MakeStore(4);  // 4 chunks of 4 tokens
  ASSERT_TRUE(SaveAll({"t", "old"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"t", "mid"}, Iota(8), 0).ok());
  store_->Match({"t", "old"}, Iota(8), 8);  // old becomes most recent
  ASSERT_TRUE(SaveAll({"t", "new"}, Iota(5), 0).ok());
  EXPECT_TRUE(store_->Get({"t", "old"}).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "mid"}).status()));
  EXPECT_TRUE(store_->Get({"t", "new"}).ok());
  EXPECT_EQ(store_->Stats().evictions, 1);
}

TEST_F(SessionStoreTest, SessionLargerThanTierIsRejectedAndDropped) {
  MakeStore(2);
  SessionKey key{"t", "big"};
  ASSERT_TRUE(SaveAll(key, Iota(4), 0).ok());
  absl::Status s = SaveAll(key, Iota(12), 4);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::IsNotFound(store_->Get(key).status()));
  EXPECT_EQ(store_->Stats().host_used_bytes, 0);
  EXPECT_EQ(store_->Stats().save_rejected, 1);
}

TEST_F(SessionStoreTest, InvalidKeepChangesNothing) {
  MakeStore(8);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(5), 0).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(SaveAll(key, Iota(9), 6)));
  EXPECT_EQ(store_->Get(key)->cached_tokens, 5);
  EXPECT_TRUE(absl::IsInvalidArgument(SaveAll({"t", "new"}, Iota(3), 1)));
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "new"}).status()));
}

TEST_F(SessionStoreTest, CorruptChunkIsNeverServed) {
  MakeStore(8);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  int64_t delivered = 0;
  auto got = store_->Read(key, 10, [&](int64_t, int count, absl::Span<const std::byte> p) {
    delivered += count;
    // Corrupt the chunk after it has been served once (the store hands out its own bytes).
    const_cast<std::byte&>(p[0]) ^= std::byte{0x80};
  });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(delivered, 10);
  delivered = 0;
  got = store_->Read(key, 10, [&](int64_t, int count, absl::Span<const std::byte>) { delivered += count; });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 0) << "a corrupt first chunk must end the readable prefix";
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(store_->Stats().corrupt_chunks, 1);
  EXPECT_EQ(store_->Get(key)->cached_tokens, 0);
  EXPECT_EQ(store_->Match(key, Iota(10), 100).tokens, 0);
}

TEST_F(SessionStoreTest, DropFreesSpace) {
  MakeStore(8);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  ASSERT_TRUE(store_->Drop(key).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Drop(key)));
  EXPECT_EQ(store_->Stats().host_used_bytes, 0);
  EXPECT_EQ(store_->Stats().sessions, 0);
}

}  // namespace
}  // namespace strata::storage
