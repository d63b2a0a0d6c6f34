// The store over the host tier alone (SessionStoreTest, storage/testing/store_fixture.h):
// prefix matches, reuse counted as hits, tenants, appends and edits, eviction, corrupt
// chunks, leases, asynchronous fills. The tiers together: tiered_store_test.cc.
#include "storage/session_store.h"

#include <cstddef>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/mutex.h"
#include "gtest/gtest.h"
#include "storage/testing/store_fixture.h"

namespace strata::storage {
namespace {

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

// A turn that reused more than its lookup matched (the engine's HBM copy, its write-back
// still in flight) counts as a hit of what it reused, for the store and its tenant.
TEST_F(SessionStoreTest, ReuseFromHbmCountsAsAHitOfWhatTheTurnReused) {
  MakeStore(16);
  const SessionKey key{"t", "hbm"};
  EXPECT_EQ(store_->Match(key, Iota(20), 100).tokens, 0);  // nothing stored yet
  store_->CountReuse(key, 0, 19);
  SessionStoreStats st = store_->Stats();
  EXPECT_EQ(st.lookups, 1);
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.hit_tokens, 19);
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  EXPECT_EQ(store_->Match(key, Iota(30), 100).tokens, 10);
  store_->CountReuse(key, 10, 29);  // a longer resident copy: 19 more, no second hit
  store_->CountReuse(key, 10, 4);   // less than matched: nothing
  st = store_->Stats();
  EXPECT_EQ(st.lookups, 2);
  EXPECT_EQ(st.hits, 2);
  EXPECT_EQ(st.hit_tokens, 19 + 29);
  const SessionStoreStats mine = store_->TenantStats("t");
  EXPECT_EQ(mine.hits, 2);
  EXPECT_EQ(mine.hit_tokens, 48);
  EXPECT_EQ(store_->TenantStats("u").hits, 0);
}

// A conversation cut after its first tokens finds its kept tokens further on in the
// session stored before the cut; the plain prefix wins when it covers more.
TEST_F(SessionStoreTest, MatchAcrossCutFindsTheKeptTokensAfterTheGap) {
  MakeStore(16);
  SessionKey key{"t", "cut"};
  ASSERT_TRUE(SaveAll(key, Iota(40), 0).ok());
  // Tokens 0..9 kept, 10..24 dropped, 25..39 kept, then new ones.
  std::vector<int32_t> cut = Iota(10);
  for (int32_t t = 25; t < 40; ++t) cut.push_back(100 + t);  // Iota starts at 100
  for (int32_t t = 0; t < 5; ++t) cut.push_back(1000 + t);
  PrefixMatch m = store_->MatchAcrossCut(key, cut, 10, 100);
  EXPECT_EQ(m.tokens, 25);
  EXPECT_EQ(m.kept, 10);
  EXPECT_EQ(m.gap, 15);
  EXPECT_EQ(m.tier, Tier::kHost);
  EXPECT_EQ(store_->MatchAcrossCut(key, cut, 10, 20).tokens, 20) << "capped";
  // The tokens before the cut must be the stored ones.
  std::vector<int32_t> other = cut;
  other[3] = 7777;
  PrefixMatch plain = store_->MatchAcrossCut(key, other, 10, 100);
  EXPECT_EQ(plain.tokens, 3);
  EXPECT_EQ(plain.gap, 0);
  // Uncut: the whole prefix, as Match.
  PrefixMatch whole = store_->MatchAcrossCut(key, Iota(40), 10, 100);
  EXPECT_EQ(whole.tokens, 40);
  EXPECT_EQ(whole.kept, 40);
  EXPECT_EQ(whole.gap, 0);
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

// A save larger than the host tier could ever hold evicts no one for it.
TEST_F(SessionStoreTest, ASaveThatCannotFitEvictsNothing) {
  MakeStore(8);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SaveAll({"t", "s" + std::to_string(i)}, Iota(8, 100 * i), 0).ok());
  absl::Status huge = SaveAll({"u", "huge"}, Iota(36), 0);  // 9 chunks of 4 tokens: never in 8
  EXPECT_TRUE(absl::IsResourceExhausted(huge)) << huge;
  EXPECT_EQ(store_->Stats().sessions, 3) << "sessions evicted for a save that could never fit";
  EXPECT_EQ(store_->Stats().evictions, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadAndCheck({"t", "s" + std::to_string(i)}, 8), 8);
}

TEST_F(SessionStoreTest, CorruptChunkIsNeverServed) {
  MakeStore(8);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  int64_t delivered = 0;
  auto got = store_->Read(key, 10, [&](int64_t, int count, absl::Span<const std::byte> p) {
    delivered += count;
    // Corrupt the chunk's header after it has been served once (the store hands out its
    // own bytes; the header sits right before the payload). Host reads check headers.
    const_cast<std::byte&>(*(p.data() - kChunkHeaderBytes + offsetof(ChunkHeader, tokens))) ^= std::byte{0x80};
  });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(delivered, 10);
  delivered = 0;
  got = store_->Read(key, 10, [&](int64_t, int count, absl::Span<const std::byte>) { delivered += count; });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 0) << "a corrupt first chunk must end the readable prefix";
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(store_->Stats().corrupt_chunks, 1);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(key).status())) << "nothing of the session is left";
  EXPECT_EQ(store_->Match(key, Iota(10), 100).tokens, 0);
}

TEST_F(SessionStoreTest, SaveLeavesChunksUnsealedWithoutAnSsdTier) {
  MakeStore(4);
  ASSERT_TRUE(SaveAll({"t", "s"}, Iota(6), 0).ok());
  auto lease = store_->Lease({"t", "s"}, 6);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_EQ(lease->chunks().size(), 2u);
  for (const LeasedChunk& c : lease->chunks()) {
    ChunkHeaderFacts facts;
    absl::Span<const std::byte> block(c.payload.data() - kChunkHeaderBytes, store_->layout().BlockBytes());
    ASSERT_TRUE(VerifyChunkHeader(store_->layout(), kFingerprint, block, &facts).ok());
    EXPECT_FALSE(facts.sealed) << "no SSD tier: nothing should have hashed the payload";
  }
}

TEST_F(SessionStoreTest, LeaseCoversTheRequestedPrefixInOrder) {
  MakeStore(8);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Lease({"t", "nobody"}, 4).status()));
  auto lease = store_->Lease(key, 6);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_EQ(lease->chunks().size(), 2u);
  EXPECT_EQ(lease->tokens(), 6);
  EXPECT_EQ(lease->chunks()[0].token_begin, 0);
  EXPECT_EQ(lease->chunks()[0].count, 4);
  EXPECT_EQ(lease->chunks()[1].token_begin, 4);
  EXPECT_EQ(lease->chunks()[1].count, 2);
  for (const LeasedChunk& c : lease->chunks()) EXPECT_TRUE(HoldsSavedBytes(c)) << "chunk at " << c.token_begin;
  auto all = store_->Lease(key, 100);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->tokens(), 10) << "a lease covers at most what is stored";
  // Moving transfers the pins; releasing twice is harmless.
  ChunkLease moved = *std::move(all);
  EXPECT_EQ(moved.tokens(), 10);
  moved.Release();
  moved.Release();
  EXPECT_TRUE(moved.empty());
  lease->Release();
  EXPECT_EQ(HostBlocksUsed(), 3);
}

TEST_F(SessionStoreTest, LeasedBlocksSurviveDropAndEvictionUntilReleasedThenAreReused) {
  MakeStore(4);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(8), 0).ok());  // 2 chunks
  auto lease = store_->Lease(a, 8);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store_->Drop(a).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get(a).status()));
  EXPECT_EQ(HostBlocksUsed(), 2) << "a dropped session's leased blocks stay pinned";
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(8, 500), 0, /*salt=*/7).ok());  // the 2 free blocks
  ASSERT_TRUE(SaveAll({"t", "c"}, Iota(4, 900), 0, /*salt=*/9).ok());  // evicts b, not the pinned blocks
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "b"}).status()));
  EXPECT_EQ(HostBlocksUsed(), 3);
  for (const LeasedChunk& c : lease->chunks()) {
    EXPECT_TRUE(HoldsSavedBytes(c)) << "leased chunk at " << c.token_begin << " was overwritten";
  }
  EXPECT_TRUE(absl::IsResourceExhausted(SaveAll({"t", "d"}, Iota(16, 300), 0)))
      << "4 chunks cannot fit while 2 blocks are leased";
  EXPECT_TRUE(store_->Get({"t", "c"}).ok()) << "the refused save took c's room";
  lease->Release();
  EXPECT_EQ(HostBlocksUsed(), 1) << "released blocks of a dropped session return to the tier";
  ASSERT_TRUE(SaveAll({"t", "d"}, Iota(16, 300), 0, /*salt=*/3).ok()) << "released blocks are reused";
  EXPECT_EQ(ReadAndCheck({"t", "d"}, 16, /*salt=*/3), 16);
}

TEST_F(SessionStoreTest, EvictionPassesOverALeasedSession) {
  MakeStore(4);
  ASSERT_TRUE(SaveAll({"t", "a"}, Iota(8), 0).ok());
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(8, 500), 0).ok());
  auto lease = store_->Lease({"t", "a"}, 8);  // a is the least recently used
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(SaveAll({"t", "c"}, Iota(4, 900), 0).ok());
  EXPECT_TRUE(store_->Get({"t", "a"}).ok()) << "the leased session was evicted for room it cannot give";
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "b"}).status()));
  lease->Release();
  EXPECT_EQ(ReadAndCheck({"t", "a"}, 8), 8);
}

TEST_F(SessionStoreTest, ResavedSessionKeepsLeasedBytesForTheLease) {
  MakeStore(8);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(8), 0).ok());
  auto lease = store_->Lease(key, 8);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(SaveAll(key, Iota(8), 0, /*salt=*/5).ok());  // every chunk written anew
  EXPECT_EQ(HostBlocksUsed(), 4);
  for (const LeasedChunk& c : lease->chunks()) EXPECT_TRUE(HoldsSavedBytes(c)) << "chunk at " << c.token_begin;
  EXPECT_EQ(ReadAndCheck(key, 8, /*salt=*/5), 8);
  lease->Release();
  EXPECT_EQ(HostBlocksUsed(), 2);
}

TEST_F(SessionStoreTest, ConcurrentLeaseReleaseSaveAndDropKeepBytesAndBlocksStraight) {
  MakeStore(12);
  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  const std::vector<SessionKey> keys = {{"t", "a"}, {"t", "b"}, {"t", "c"}};
  // Leases are handed to a releasing thread, as a copy-completion callback would.
  Mutex mu;
  std::deque<ChunkLease> to_release ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  std::thread releaser([&] {
    for (;;) {
      ChunkLease lease;
      {
        MutexLock lock(&mu);
        mu.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return done || !to_release.empty(); });
        if (to_release.empty()) return;
        lease = std::move(to_release.front());
        to_release.pop_front();
      }
      for (const LeasedChunk& c : lease.chunks()) EXPECT_TRUE(HoldsSavedBytes(c));
      lease.Release();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const SessionKey& key = keys[static_cast<size_t>((i + t) % 3)];
        switch ((i * 7 + t) % 5) {
          case 0:
          case 1: {
            (void)SaveAll(key, Iota(1 + (i % 12)), 0);  // may be rejected when leases pin the tier
            break;
          }
          case 2: {
            (void)store_->Drop(key);
            break;
          }
          default: {
            auto lease = store_->Lease(key, 12);
            if (!lease.ok()) break;
            for (const LeasedChunk& c : lease->chunks()) EXPECT_TRUE(HoldsSavedBytes(c));
            if (i % 2 == 0) {
              MutexLock lock(&mu);
              to_release.push_back(*std::move(lease));
            }  // else released here
          }
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  {
    MutexLock lock(&mu);
    done = true;
  }
  releaser.join();
  for (const SessionKey& key : keys) (void)store_->Drop(key);
  EXPECT_EQ(HostBlocksUsed(), 0) << "every pin was released and every block came back";
}

// SaveAsync: the payloads are filled after it returns (as a DMA engine does). Until
// FinishFill the session is not served and its blocks are never handed to another
// session; a failed fill drops it.
TEST_F(SessionStoreTest, AsyncSaveIsServedOnlyOnceFilledAndItsBlocksStayPinnedTillThen) {
  MakeStore(4);  // 4 chunks of 4 tokens
  const ChunkLayout& layout = store_->layout();
  std::vector<absl::Span<std::byte>> payloads;
  auto collect = [&](int64_t, int, absl::Span<std::byte> p) { payloads.push_back(p); };
  // What the DMA engine writes, late: SaveAll's bytes.
  auto land = [&] {
    for (size_t c = 0; c < payloads.size(); ++c)
      for (int i = 0; i < 4; ++i)
        for (int l = 0; l < layout.layers; ++l)
          for (int kv = 0; kv < 2; ++kv)
            std::memset(payloads[c].data() + layout.RowOffset(l, kv, i),
                        static_cast<int>(RowByte(static_cast<int64_t>(c) * 4 + i, l, kv, 0)),
                        static_cast<size_t>(layout.row_bytes));
    payloads.clear();
  };
  SessionKey a{"t", "a"};
  auto ticket = store_->SaveAsync(a, Iota(8), 0, collect);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  ASSERT_EQ(payloads.size(), 2u);
  EXPECT_EQ(store_->Match(a, Iota(8), 100).tokens, 0) << "served before it was filled";
  EXPECT_TRUE(store_->Lease(a, 8)->empty());
  land();
  store_->FinishFill(*ticket, absl::OkStatus());
  EXPECT_EQ(store_->Match(a, Iota(8), 100).tokens, 8);
  EXPECT_EQ(ReadAndCheck(a, 8), 8);

  // A session being filled is passed over for room: a save that needs its blocks could
  // get only a's, and is refused without taking them.
  SessionKey b{"t", "b"};
  auto second = store_->SaveAsync(b, Iota(8, 300), 0, collect);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(SaveAll({"t", "c"}, Iota(16, 500), 0)));
  EXPECT_EQ(HostBlocksUsed(), 4) << "b's blocks went to another session while b was being filled";
  EXPECT_EQ(ReadAndCheck(a, 8), 8) << "the refused save took a's room";
  land();
  store_->FinishFill(*second, absl::OkStatus());
  EXPECT_EQ(ReadAndCheck(b, 8), 8);

  // A failed fill drops the session; a second finish changes nothing.
  SessionKey d{"t", "d"};
  auto third = store_->SaveAsync(d, Iota(4, 700), 0, collect);
  ASSERT_TRUE(third.ok());
  payloads.clear();
  store_->FinishFill(*third, absl::InternalError("the copy failed"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get(d).status()));
  store_->FinishFill(*third, absl::OkStatus());
  EXPECT_TRUE(absl::IsNotFound(store_->Get(d).status()));
  EXPECT_EQ(ReadAndCheck(b, 8), 8);
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


TEST_F(SessionStoreTest, FlushWithoutSsdIsFailedPrecondition) {
  MakeStore(4);
  ASSERT_TRUE(SaveAll({"t", "s"}, Iota(3), 0).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(store_->Flush({"t", "s"}, absl::Seconds(1))));
}

}  // namespace
}  // namespace strata::storage
