// The store over both tiers (TieredStoreTest, storage/testing/store_fixture.h): persisting,
// demotion and promotion, the scheduler's look-ahead and gateway hints, recovery after a
// restart, TTL, a full SSD, corrupt chunks on SSD and in host memory, leases across tiers.
#include "storage/session_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/time/clock.h"
#include "base/mutex.h"
#include "gtest/gtest.h"
#include "storage/testing/store_fixture.h"

namespace strata::storage {
namespace {

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

// A partial chunk saved into a block another session's full chunk filled: its unused rows
// still hold that session's bytes until the write-back zeroes them, before hashing and
// writing them, so the disk (and, after a restart, every read) sees zeros there.
TEST_F(TieredStoreTest, APartialChunksUnusedRowsReachTheDiskZeroed) {
  MakeTiered(1, 32);  // one host block: the second session's chunk reuses the first's
  const ChunkLayout layout = store_->layout();  // a copy: the store is made again below
  ASSERT_TRUE(SaveAll({"t", "full"}, Iota(4), 0, /*salt=*/7).ok());
  ASSERT_TRUE(store_->Flush({"t", "full"}, absl::Seconds(10)).ok());  // its write-back no longer holds the block
  ASSERT_TRUE(store_->Drop({"t", "full"}).ok());
  const SessionKey key{"t", "partial"};
  ASSERT_TRUE(SaveAll(key, Iota(3), 0).ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  auto zeroed_past_its_rows = [&](const LeasedChunk& c) {
    for (int l = 0; l < layout.layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int64_t b = layout.RowOffset(l, kv, c.count); b < layout.RowOffset(l, kv, layout.chunk_tokens); ++b) {
          if (c.payload[static_cast<size_t>(b)] != std::byte{0}) return false;
        }
      }
    }
    return true;
  };
  for (bool restarted : {false, true}) {
    if (restarted) MakeTiered(1, 32);  // the chunk comes back from the disk, verified
    auto lease = store_->Lease(key, 3);
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_EQ(lease->chunks().size(), 1u);
    const LeasedChunk& c = lease->chunks()[0];
    EXPECT_EQ(c.count, 3);
    EXPECT_TRUE(HoldsSavedBytes(c)) << restarted;
    EXPECT_TRUE(zeroed_past_its_rows(c)) << (restarted ? "on disk" : "in host memory after the write-back");
    lease->Release();
  }
  EXPECT_EQ(store_->Stats().corrupt_chunks, 0);
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

}  // namespace
}  // namespace strata::storage
