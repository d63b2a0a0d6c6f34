#include "storage/session_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/mutex.h"
#include "gtest/gtest.h"
#include "storage/testing/store_fixture.h"
#include "storage/testing/temp_dir.h"

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
  lease->Release();
  EXPECT_EQ(HostBlocksUsed(), 0) << "released blocks of a dropped session return to the tier";
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
// session, even once it has been evicted; a failed fill drops it.
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

  // A session being filled is passed over for room: a save that needs its blocks gets
  // only a's and is refused.
  SessionKey b{"t", "b"};
  auto second = store_->SaveAsync(b, Iota(8, 300), 0, collect);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(SaveAll({"t", "c"}, Iota(16, 500), 0)));
  EXPECT_EQ(HostBlocksUsed(), 2) << "b's blocks went to another session while b was being filled";
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


// The SSD's read speed is known before the first promotion: probed at start (the probe's
// blocks given back), or as assumed; unknown (0) only with the probe off.
TEST_F(TieredStoreTest, SsdReadSpeedIsKnownBeforeTheFirstPromotion) {
  MakeTiered(4, 32);
  EXPECT_GT(store_->ssd_read_bytes_per_second(), 0);
  EXPECT_EQ(store_->Stats().ssd_used_bytes, 0) << "the probe left blocks in use";
  EXPECT_EQ(store_->Stats().ssd_bytes_read, 0) << "the probe is not the tier's traffic";
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  EXPECT_EQ(ReadAndCheck(key, 10), 10);
  tweak_ = [](SessionStoreOptions& o) { o.ssd_read_bytes_per_second = 1234; };
  MakeTiered(4, 32);
  EXPECT_EQ(store_->ssd_read_bytes_per_second(), 1234);
  EXPECT_EQ(ReadAndCheck(key, 10), 10) << "the probe overwrote a persisted session's block";
  tweak_ = [](SessionStoreOptions& o) { o.ssd_probe_bytes = 0; };
  MakeTiered(4, 32);
  EXPECT_EQ(store_->ssd_read_bytes_per_second(), 0);
  store_.reset();
  SessionStoreOptions bad;
  bad.layout = ChunkLayout{.layers = 2, .chunk_tokens = 4, .row_bytes = 8};
  bad.ssd_read_bytes_per_second = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(SessionStore::Create(bad).status()));
}

TEST_F(TieredStoreTest, FlushPersistsAndGetSaysSo) {
  MakeTiered(8, 32);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  auto info = store_->Get(key);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->persisted);
  EXPECT_EQ(info->tier, Tier::kHost);
  EXPECT_GT(store_->Stats().ssd_used_bytes, 0);
  EXPECT_TRUE(absl::IsNotFound(store_->Flush({"t", "nobody"}, absl::Seconds(1))));
}

TEST_F(TieredStoreTest, PersistedSessionIsDemotedThenPromotedOnRead) {
  MakeTiered(3, 32);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(8), 0).ok());  // 2 chunks
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(8, 500), 0).ok());  // needs a's host room
  auto info = store_->Get(a);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tier, Tier::kSsd);
  EXPECT_EQ(store_->Stats().demotions, 1);
  PrefixMatch m = store_->Match(a, Iota(12), 100);
  EXPECT_EQ(m.tokens, 8);
  EXPECT_EQ(m.tier, Tier::kSsd);
  ASSERT_TRUE(store_->Flush({"t", "b"}, absl::Seconds(10)).ok());  // so b can make room
  EXPECT_EQ(ReadAndCheck(a, 8), 8);
  EXPECT_EQ(store_->Get(a)->tier, Tier::kHost);
  EXPECT_EQ(store_->Stats().promotions, 1);
}

// Waits for one Promote() callback and returns its status.
class PromoteWaiter {
 public:
  SessionStore::PromoteDone Callback() {
    return [this](absl::Status s) {
      status_ = std::move(s);
      done_.Notify();
    };
  }
  absl::Status Wait() {
    done_.WaitForNotification();
    return status_;
  }

 private:
  Notification done_;
  absl::Status status_;
};

TEST_F(TieredStoreTest, PromoteBringsAnSsdOnlySessionBackAsynchronously) {
  MakeTiered(3, 32);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(8), 0).ok());
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(4, 500), 0).ok());
  ASSERT_TRUE(store_->Flush({"t", "b"}, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll({"t", "c"}, Iota(4, 900), 0).ok());  // a is demoted
  ASSERT_EQ(store_->Get(a)->tier, Tier::kSsd);
  // Two callers, one promotion.
  PromoteWaiter first, second;
  store_->Promote(a, first.Callback());
  store_->Promote(a, second.Callback());
  EXPECT_TRUE(first.Wait().ok());
  EXPECT_TRUE(second.Wait().ok());
  EXPECT_EQ(store_->Stats().promotions, 1);
  EXPECT_EQ(store_->Get(a)->tier, Tier::kHost);
  EXPECT_EQ(ReadAndCheck(a, 8), 8);
  EXPECT_EQ(store_->Stats().promotions, 1);  // the read found it on host
  // Already on host: OK at once; unknown: NotFound.
  PromoteWaiter again, nobody;
  store_->Promote(a, again.Callback());
  EXPECT_TRUE(again.Wait().ok());
  store_->Promote({"t", "nobody"}, nobody.Callback());
  EXPECT_TRUE(absl::IsNotFound(nobody.Wait()));
}

TEST_F(TieredStoreTest, PromotionWithoutHostRoomIsResourceExhaustedAndChangesNothing) {
  MakeTiered(4, 32);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(12), 0).ok());  // 3 chunks
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  MakeTiered(2, 32);  // restarted with a host tier too small for it
  ASSERT_EQ(store_->Get(a)->tier, Tier::kSsd);
  PromoteWaiter w;
  store_->Promote(a, w.Callback());
  absl::Status s = w.Wait();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(store_->Stats().promotion_failures, 1);
  auto info = store_->Get(a);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tier, Tier::kSsd);
  EXPECT_TRUE(info->persisted);
  EXPECT_EQ(store_->Match(a, Iota(12), 100).tokens, 12);
}

// Saves and persists `tokens` tokens (4 per chunk) for `id`.
#define SAVE_AND_FLUSH(id, tokens, start)                                 \
  do {                                                                  \
    ASSERT_TRUE(SaveAll({"t", id}, Iota(tokens, start), 0).ok());       \
    ASSERT_TRUE(store_->Flush({"t", id}, absl::Seconds(10)).ok());      \
  } while (0)

TEST_F(TieredStoreTest, QueuedSessionIsNeverEvictedButLruWouldEvictIt) {
  for (PlacementPolicy policy : {PlacementPolicy::kSchedulerAware, PlacementPolicy::kLru}) {
    SCOPED_TRACE(PlacementPolicyName(policy));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/ssd");
    MakeTiered(1, 2, kFingerprint, absl::Hours(1), policy);
    SAVE_AND_FLUSH("a", 4, 100);
    SAVE_AND_FLUSH("b", 4, 200);  // a is demoted: host holds b, SSD holds a and b
    store_->SetLookAhead({{"t", "a"}, {"t", "b"}});  // both about to run; no room to prefetch
    // c's save demotes b; its write-back needs an SSD block, which only a or b could free.
    ASSERT_TRUE(SaveAll({"t", "c"}, Iota(4, 300), 0).ok());
    const bool aware = policy == PlacementPolicy::kSchedulerAware;
    // Under scheduler-aware the write-back cannot find room: the flush times out.
    (void)store_->Flush({"t", "c"}, aware ? absl::Milliseconds(300) : absl::Seconds(10));
    if (aware) {
      EXPECT_TRUE(store_->Get({"t", "a"}).ok()) << "a queued session left the store";
      EXPECT_TRUE(store_->Get({"t", "b"}).ok()) << "a queued session left the store";
      EXPECT_FALSE(store_->Get({"t", "c"})->persisted);  // it waits for room instead
      EXPECT_EQ(store_->Stats().evictions, 0);
    } else {
      EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "a"}).status()));  // least recently used
      EXPECT_TRUE(store_->Get({"t", "c"})->persisted);
      EXPECT_EQ(store_->Stats().evictions_ssd_full, 1);
    }
  }
}

TEST_F(TieredStoreTest, LookAheadPrefetchesAnSsdOnlySessionBeforeItsTurn) {
  MakeTiered(4, 32);
  SAVE_AND_FLUSH("a", 12, 100);  // 3 chunks
  SAVE_AND_FLUSH("b", 4, 200);
  SAVE_AND_FLUSH("c", 4, 300);   // a is demoted; host: b, c and 2 free blocks
  ASSERT_EQ(store_->Get({"t", "a"})->tier, Tier::kSsd);
  // b and c queued ahead of a: making room for a would take a queued session, so the
  // prefetch does not start and nothing moves.
  store_->SetLookAhead({{"t", "b"}, {"t", "c"}, {"t", "a"}});
  EXPECT_EQ(store_->Stats().prefetches, 0);
  EXPECT_EQ(store_->Get({"t", "b"})->tier, Tier::kHost);
  EXPECT_EQ(store_->Get({"t", "c"})->tier, Tier::kHost);
  EXPECT_EQ(store_->Get({"t", "a"})->tier, Tier::kSsd);
  EXPECT_EQ(store_->Stats().lookahead_sessions, 3);
  // Only a queued: b (least recently used, outside the look-ahead) is demoted for it.
  store_->SetLookAhead({{"t", "a"}});
  EXPECT_EQ(store_->Stats().prefetches, 1);
  for (int i = 0; i < 200 && store_->Get({"t", "a"})->tier != Tier::kHost; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(store_->Get({"t", "a"})->tier, Tier::kHost);
  EXPECT_EQ(store_->Get({"t", "b"})->tier, Tier::kSsd);
  EXPECT_EQ(store_->Get({"t", "c"})->tier, Tier::kHost);
  // a's turn comes: a host hit thanks to the prefetch.
  PrefixMatch m = store_->Match({"t", "a"}, Iota(12, 100), 100);
  EXPECT_EQ(m.tokens, 12);
  EXPECT_EQ(m.tier, Tier::kHost);
  EXPECT_EQ(store_->Stats().prefetch_in_time, 1);
  EXPECT_EQ(ReadAndCheck({"t", "a"}, 12), 12);
}

TEST_F(TieredStoreTest, GatewayHintPrefetchesWithoutTheQueue) {
  MakeTiered(4, 32);
  SAVE_AND_FLUSH("a", 8, 100);
  SAVE_AND_FLUSH("b", 8, 200);
  SAVE_AND_FLUSH("c", 4, 300);  // a demoted
  ASSERT_TRUE(store_->Drop({"t", "c"}).ok());  // 2 blocks free: room for one mean session
  store_->SetLookAhead({});
  EXPECT_FALSE(store_->Hint({"t", "nobody"}));
  ASSERT_TRUE(store_->Hint({"t", "a"}));
  for (int i = 0; i < 200 && store_->Get({"t", "a"})->tier != Tier::kHost; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(store_->Get({"t", "a"})->tier, Tier::kHost);
  EXPECT_EQ(store_->Stats().prefetches, 1);
}

TEST_F(TieredStoreTest, ReopenRecoversPersistedSessionsBitExact) {
  MakeTiered(8, 32);
  ASSERT_TRUE(SaveAll({"t", "p"}, Iota(11), 0).ok());
  ASSERT_TRUE(store_->Flush({"t", "p"}, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll({"u", "q"}, Iota(5, 900), 0).ok());
  ASSERT_TRUE(store_->Flush({"u", "q"}, absl::Seconds(10)).ok());
  MakeTiered(8, 32);  // a restart
  EXPECT_EQ(store_->Match({"t", "p"}, Iota(11), 100).tokens, 11);
  EXPECT_EQ(ReadAndCheck({"t", "p"}, 11), 11);
  EXPECT_EQ(store_->List("u").size(), 1u);
  EXPECT_TRUE(store_->Get({"u", "q"})->persisted);
}

TEST_F(TieredStoreTest, AnotherModelDoesNotRecoverOldKv) {
  MakeTiered(8, 32);
  ASSERT_TRUE(SaveAll({"t", "p"}, Iota(9), 0).ok());
  ASSERT_TRUE(store_->Flush({"t", "p"}, absl::Seconds(10)).ok());
  MakeTiered(8, 32, /*fingerprint=*/kFingerprint + 1);
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "p"}).status()));
  EXPECT_EQ(store_->Stats().ssd_used_bytes, 0);
}

TEST_F(TieredStoreTest, DroppedSessionStaysGoneAfterRestart) {
  MakeTiered(8, 32);
  ASSERT_TRUE(SaveAll({"t", "d"}, Iota(9), 0).ok());
  ASSERT_TRUE(store_->Flush({"t", "d"}, absl::Seconds(10)).ok());
  ASSERT_TRUE(store_->Drop({"t", "d"}).ok());
  MakeTiered(8, 32);  // the destructor drains the record deletion first
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "d"}).status()));
  EXPECT_EQ(store_->Stats().ssd_used_bytes, 0);
}

TEST_F(TieredStoreTest, ExpiredSessionsAreDropped) {
  MakeTiered(8, 32, kFingerprint, absl::Milliseconds(50));
  ASSERT_TRUE(SaveAll({"t", "old"}, Iota(5), 0).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(store_->Match({"t", "old"}, Iota(5), 100).tokens, 0);
  EXPECT_EQ(store_->Stats().expired, 1);
  EXPECT_EQ(store_->Stats().host_used_bytes, 0);
}

TEST_F(TieredStoreTest, FullSsdEvictsSsdOnlySessions) {
  MakeTiered(2, 3);
  ASSERT_TRUE(SaveAll({"t", "a"}, Iota(8), 0).ok());  // 2 chunks
  ASSERT_TRUE(store_->Flush({"t", "a"}, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(8, 300), 0).ok());  // demotes a
  ASSERT_TRUE(store_->Flush({"t", "b"}, absl::Seconds(10)).ok());  // SSD full: a leaves
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "a"}).status()));
  EXPECT_TRUE(store_->Get({"t", "b"})->persisted);
}

// Flips a payload byte of the chunk at `block` of the SSD file, behind the store's back.
void CorruptSsdBlock(const std::string& ssd_dir, int64_t block, int64_t block_bytes) {
  int fd = open((ssd_dir + "/strata-ssd.data").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::byte b{};
  const off_t at = static_cast<off_t>(block * block_bytes + kChunkHeaderBytes + 5);
  ASSERT_EQ(pread(fd, &b, 1, at), 1);
  b ^= std::byte{0x40};
  ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
  ASSERT_EQ(fsync(fd), 0);
  close(fd);
}

TEST_F(TieredStoreTest, CorruptSsdChunkIsCutOffAndTheRecordReplaced) {
  MakeTiered(3, 32);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(8), 0).ok());  // 2 chunks: SSD blocks 0 and 1
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(8, 500), 0).ok());  // demotes a
  ASSERT_TRUE(store_->Flush({"t", "b"}, absl::Seconds(10)).ok());
  ASSERT_EQ(store_->Get(a)->tier, Tier::kSsd);
  CorruptSsdBlock(dir_ + "/ssd", 1, store_->layout().BlockBytes());
  EXPECT_EQ(ReadAndCheck(a, 8), 4) << "only the verified first chunk is served";
  EXPECT_EQ(store_->Stats().corrupt_chunks, 1);
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok()) << "the cut session is persisted anew";
  MakeTiered(3, 32);  // restart: the record names only the good chunk
  EXPECT_EQ(store_->Match(a, Iota(8), 100).tokens, 4);
  EXPECT_EQ(ReadAndCheck(a, 4), 4);
  EXPECT_EQ(store_->Stats().corrupt_chunks, 0);
}

TEST_F(TieredStoreTest, SessionWhoseFirstSsdChunkIsCorruptIsAMissAndLeavesTheIndex) {
  MakeTiered(2, 32);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(6), 0).ok());  // SSD blocks 0 and 1
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(8, 500), 0).ok());  // demotes a
  ASSERT_TRUE(store_->Flush({"t", "b"}, absl::Seconds(10)).ok());
  CorruptSsdBlock(dir_ + "/ssd", 0, store_->layout().BlockBytes());
  int64_t served = 0;
  auto got = store_->Read(a, 6, [&](int64_t, int count, absl::Span<const std::byte>) { served += count; });
  EXPECT_EQ(served, 0) << "corrupt bytes are never served";
  EXPECT_TRUE(absl::IsNotFound(store_->Get(a).status()));
  MakeTiered(2, 32);  // the destructor drained the record's deletion
  EXPECT_TRUE(absl::IsNotFound(store_->Get(a).status()));
  EXPECT_TRUE(store_->Get({"t", "b"}).ok());
}

TEST_F(TieredStoreTest, WriteBackSealsChunksAndTheRecordBindsThem) {
  MakeTiered(8, 32);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  auto lease = store_->Lease(key, 10);
  ASSERT_TRUE(lease.ok());
  for (const LeasedChunk& c : lease->chunks()) {
    absl::Span<const std::byte> block(c.payload.data() - kChunkHeaderBytes, store_->layout().BlockBytes());
    EXPECT_TRUE(VerifyChunk(store_->layout(), kFingerprint, block, nullptr).ok())
        << "a persisted chunk's host copy must be sealed with its payload's checksum";
  }
  lease->Release();
  MakeTiered(8, 32);  // a restart: the first promotion checks the chunks against the record
  EXPECT_EQ(ReadAndCheck(key, 10), 10);
  EXPECT_EQ(store_->Stats().corrupt_chunks, 0);
  EXPECT_EQ(store_->Stats().promotions, 1);
}

TEST_F(TieredStoreTest, PayloadCorruptedInHostMemoryNeverReachesSsd) {
  MakeTiered(8, 32);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(12), 0).ok());  // 3 chunks
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());  // sealed and persisted
  {
    auto lease = store_->Lease(a, 12);
    ASSERT_TRUE(lease.ok());
    ASSERT_EQ(lease->chunks().size(), 3u);
    // A stray write into chunk 1's payload, behind the store's back.
    const_cast<std::byte&>(lease->chunks()[1].payload[3]) ^= std::byte{0x10};
  }
  // The next turn keeps the three chunks and appends one: the write-back checks the kept
  // chunks before writing them and cuts the session before the damaged one.
  ASSERT_TRUE(SaveAll(a, Iota(14), 12).ok());
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok()) << "the cut session is persisted";
  EXPECT_EQ(store_->Stats().corrupt_chunks, 1);
  auto info = store_->Get(a);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->cached_tokens, 4);
  EXPECT_TRUE(info->persisted);
  EXPECT_EQ(ReadAndCheck(a, 14), 4);
  MakeTiered(8, 32);  // restart: only the good chunk is named by the record
  EXPECT_EQ(store_->Match(a, Iota(14), 100).tokens, 4);
  EXPECT_EQ(ReadAndCheck(a, 14), 4) << "only the verified chunk comes back from SSD";
  EXPECT_EQ(store_->Stats().corrupt_chunks, 0) << "nothing corrupt was persisted";
}

TEST_F(TieredStoreTest, LeaseKeepsASessionFromDemotionAndPromotesOnLease) {
  MakeTiered(3, 32);
  SessionKey a{"t", "a"};
  ASSERT_TRUE(SaveAll(a, Iota(8), 0).ok());  // 2 chunks
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  {
    auto lease = store_->Lease(a, 8);
    ASSERT_TRUE(lease.ok());
    EXPECT_TRUE(absl::IsResourceExhausted(SaveAll({"t", "b"}, Iota(8, 500), 0)))
        << "demoting a leased session frees nothing";
    EXPECT_EQ(store_->Get(a)->tier, Tier::kHost);
    for (const LeasedChunk& c : lease->chunks()) EXPECT_TRUE(HoldsSavedBytes(c));
  }
  ASSERT_TRUE(SaveAll({"t", "b"}, Iota(8, 500), 0).ok());  // released: a is demoted now
  ASSERT_EQ(store_->Get(a)->tier, Tier::kSsd);
  ASSERT_TRUE(store_->Flush({"t", "b"}, absl::Seconds(10)).ok());
  auto lease = store_->Lease(a, 8);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->tokens(), 8) << "a lease of an SSD-only session promotes it";
  for (const LeasedChunk& c : lease->chunks()) EXPECT_TRUE(HoldsSavedBytes(c));
  EXPECT_EQ(store_->Stats().promotions, 1);
}

TEST_F(TieredStoreTest, TtlSweepLeavesLeasedBlocksAlone) {
  MakeTiered(8, 32, kFingerprint, absl::Milliseconds(50));
  ASSERT_TRUE(SaveAll({"t", "old"}, Iota(5), 0).ok());
  ASSERT_TRUE(store_->Flush({"t", "old"}, absl::Seconds(10)).ok());  // no write-back holds its blocks
  auto lease = store_->Lease({"t", "old"}, 5);
  ASSERT_TRUE(lease.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(store_->Match({"t", "old"}, Iota(5), 100).tokens, 0);
  EXPECT_EQ(store_->Stats().expired, 1);
  EXPECT_EQ(HostBlocksUsed(), 2);
  for (const LeasedChunk& c : lease->chunks()) EXPECT_TRUE(HoldsSavedBytes(c));
  lease->Release();
  EXPECT_EQ(HostBlocksUsed(), 0);
}

TEST_F(TieredStoreTest, IoSamplesCoverBothTiers) {
  MakeTiered(8, 32);
  ASSERT_TRUE(SaveAll({"t", "s"}, Iota(9), 0).ok());
  ASSERT_TRUE(store_->Flush({"t", "s"}, absl::Seconds(10)).ok());
  EXPECT_EQ(ReadAndCheck({"t", "s"}, 9), 9);
  bool host_write = false, host_read = false, ssd_write = false;
  for (const TierIoSample& io : store_->TakeIoSamples()) {
    EXPECT_GE(io.seconds, 0);
    EXPECT_GT(io.bytes, 0);
    host_write |= io.tier == Tier::kHost && io.write;
    host_read |= io.tier == Tier::kHost && !io.write;
    ssd_write |= io.tier == Tier::kSsd && io.write;
  }
  EXPECT_TRUE(host_write && host_read && ssd_write);
}

TEST_F(SessionStoreTest, FlushWithoutSsdIsFailedPrecondition) {
  MakeStore(4);
  ASSERT_TRUE(SaveAll({"t", "s"}, Iota(3), 0).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(store_->Flush({"t", "s"}, absl::Seconds(1))));
}

}  // namespace
}  // namespace strata::storage
