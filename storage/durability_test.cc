// A session acknowledged as persisted is deleted only by Drop, TTL, corruption or the SSD
// tier's own room: a newer version that cannot be kept (too large for the host tier, its
// copy failed, pushed out of the host tier before it was written) goes alone, and the
// session falls back to its persisted version — also after a restart. Every deletion of
// a persisted version is counted.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/session_index.h"
#include "storage/testing/store_fixture.h"

namespace strata::storage {
namespace {

class DurabilityTest : public TieredStoreTest {
 protected:
  // The session holds its persisted `tokens` (written with `salt`) on SSD, served from there,
  // and so it does after a restart.
  void ExpectPersisted(const SessionKey& key, int tokens, int salt = 0) {
    auto info = store_->Get(key);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_TRUE(info->persisted);
    EXPECT_EQ(info->cached_tokens, tokens);
    PrefixMatch m = store_->Match(key, Iota(tokens), tokens);
    EXPECT_EQ(m.tokens, tokens);
    EXPECT_EQ(ReadAndCheck(key, tokens, salt), tokens);
    MakeTiered(host_chunks_, ssd_chunks_);
    info = store_->Get(key);
    ASSERT_TRUE(info.ok()) << "lost across a restart: " << info.status();
    EXPECT_EQ(info->cached_tokens, tokens);
    EXPECT_EQ(ReadAndCheck(key, tokens, salt), tokens);
  }
  void Make(int64_t host_chunks, int64_t ssd_chunks) {
    host_chunks_ = host_chunks;
    ssd_chunks_ = ssd_chunks;
    MakeTiered(host_chunks, ssd_chunks);
  }
  int64_t host_chunks_ = 0, ssd_chunks_ = 0;
};

TEST_F(DurabilityTest, ANewerVersionTooLargeForTheHostTierLeavesThePersistedOne) {
  Make(4, 32);  // chunks of 4 tokens
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  absl::Status grown = SaveAll(key, Iota(40), 8);
  EXPECT_TRUE(absl::IsResourceExhausted(grown)) << grown;
  EXPECT_EQ(store_->Stats().save_rejected, 1);
  // The turn that grew it is not persisted, and Flush says so.
  absl::Status flush = store_->Flush(key, absl::Seconds(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(flush)) << flush;
  EXPECT_EQ(store_->Stats().persisted_deleted, 0);
  ExpectPersisted(key, 10);
}

TEST_F(DurabilityTest, AFailedCopyOfANewerVersionLeavesThePersistedOne) {
  Make(8, 32);
  SessionKey key{"t", "s"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  auto ticket = store_->SaveAsync(key, Iota(20), 8, [](int64_t, int, absl::Span<std::byte>) {});
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  store_->FinishFill(*ticket, absl::InternalError("the copy failed"));
  EXPECT_EQ(store_->Stats().reverted_to_persisted, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(store_->Flush(key, absl::Seconds(1))));
  ExpectPersisted(key, 10);
  // The next version saved and flushed is persisted as usual.
  ASSERT_TRUE(SaveAll(key, Iota(14), 8).ok());
  EXPECT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  ExpectPersisted(key, 14);
}

// The newer version is pushed out of the host tier before it could be written (the SSD
// had no room for it): the persisted older one stays, on SSD.
TEST_F(DurabilityTest, HostEvictionOfAnUnwrittenNewerVersionLeavesThePersistedOne) {
  tweak_ = [](SessionStoreOptions& o) { o.placement = PlacementPolicy::kLru; };
  Make(9, 6);
  SessionKey a{"t", "a"}, b{"t", "b"}, c{"t", "c"};
  ASSERT_TRUE(SaveAll(a, Iota(8), 0).ok());  // 2 chunks
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll(b, Iota(16, 300), 0).ok());  // 4 chunks: the SSD is full
  ASSERT_TRUE(store_->Flush(b, absl::Seconds(10)).ok());
  // a's newer version (3 chunks) finds no SSD room (b still has its host copy, so it may
  // not be evicted from SSD): it stays on host only.
  ASSERT_TRUE(SaveAll(a, Iota(12), 8).ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(store_->Flush(a, absl::Milliseconds(300))));
  // c needs 7 host blocks: b is demoted, and a's newer version is pushed out.
  ASSERT_TRUE(SaveAll(c, Iota(28, 600), 0).ok());
  EXPECT_EQ(store_->Stats().reverted_to_persisted, 1);
  EXPECT_EQ(store_->Stats().evictions_host_full, 0) << "a did not leave the store";
  // c (7 chunks) can never fit the 6-chunk SSD: it evicts nobody for it.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(store_->Stats().persisted_deleted, 0);
  EXPECT_EQ(store_->Stats().evictions_ssd_full, 0);
  auto info = store_->Get(b);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->persisted);
  ExpectPersisted(a, 8);
}

// A turn decides what it keeps against the version it matched; before it saves, that
// (unpersisted) version is pushed out and the session falls back to an older one whose
// tokens differ. The save keeps only the chunks the fallen-back version shares with it:
// never another version's KV under these tokens.
TEST_F(DurabilityTest, AKeepDecidedAgainstAVersionSinceGoneKeepsOnlyWhatMatches) {
  tweak_ = [](SessionStoreOptions& o) {
    o.placement = PlacementPolicy::kLru;
    o.tenant_quota.ssd_bytes = 3 * o.layout.BlockBytes();  // the newer version (4 chunks) stays host-only
  };
  Make(8, 64);
  SessionKey a{"t", "a"}, other{"u", "b"};
  const std::vector<int32_t> older = Iota(8, 100);
  ASSERT_TRUE(SaveAll(a, older, 0, /*salt=*/1).ok());
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  const std::vector<int32_t> newer = Iota(16, 900);  // the history edited: differs from token 0
  ASSERT_TRUE(SaveAll(a, newer, 0, /*salt=*/2).ok());
  ASSERT_EQ(store_->Match(a, newer, 100).tokens, 16);  // the turn matches it and will keep 8
  ASSERT_TRUE(SaveAll(other, Iota(20, 5000), 0).ok());  // host pressure: the newer version goes
  ASSERT_EQ(store_->Get(a)->cached_tokens, 8) << "the session did not fall back";
  { ASSERT_TRUE(store_->Lease(a, 1).ok()); }  // a prefetch brings the older one to host
  std::vector<int32_t> next = newer;
  for (int i = 0; i < 4; ++i) next.push_back(7000 + i);
  ASSERT_TRUE(SaveAll(a, next, /*keep=*/8, /*salt=*/2).ok());
  EXPECT_EQ(store_->Match(a, next, 100).tokens, 20);
  EXPECT_EQ(ReadAndCheck(a, 20, /*salt=*/2), 20) << "tokens served with another version's KV";
}

// A version whose write-back found no SSD room is written back once room comes (here a
// session dropped), not left host-only until it is saved again.
TEST_F(DurabilityTest, AVersionThatFoundNoSsdRoomIsWrittenBackWhenRoomComes) {
  tweak_ = [](SessionStoreOptions& o) { o.placement = PlacementPolicy::kLru; };
  Make(16, 6);
  SessionKey a{"t", "a"}, b{"t", "b"};
  ASSERT_TRUE(SaveAll(a, Iota(8), 0).ok());  // 2 chunks
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll(b, Iota(16, 300), 0).ok());  // 4 chunks: the SSD is full
  ASSERT_TRUE(store_->Flush(b, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll(a, Iota(12), 8).ok());  // 3 chunks: no room (b, on host too, is not evicted)
  EXPECT_TRUE(absl::IsDeadlineExceeded(store_->Flush(a, absl::Milliseconds(300))));
  ASSERT_TRUE(store_->Drop(b).ok());
  EXPECT_TRUE(store_->Flush(a, absl::Seconds(10)).ok()) << "room came, and the version stayed host-only";
  ExpectPersisted(a, 12);
}

TEST_F(DurabilityTest, EveryDeletionOfAPersistedVersionIsCounted) {
  Make(8, 32);
  SessionKey key{"t", "s"}, fresh{"t", "fresh"};
  ASSERT_TRUE(SaveAll(key, Iota(10), 0).ok());
  ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll(fresh, Iota(6), 0).ok());
  ASSERT_TRUE(store_->Drop(fresh).ok());  // never persisted: nothing to count
  ASSERT_TRUE(store_->Drop(key).ok());
  EXPECT_EQ(store_->Stats().persisted_deleted, 1);
}

// A data file deleted or cut short while the server was down: the records it cannot back
// are dropped at start (counted, logged), not advertised; the rest are served intact.
TEST_F(DurabilityTest, RecordsTheDataFileCannotBackAreDroppedAtStart) {
  Make(16, 64);
  for (int i = 0; i < 6; ++i) {
    SessionKey key{"t", "s" + std::to_string(i)};
    ASSERT_TRUE(SaveAll(key, Iota(8), 0).ok());  // 2 chunks each, blocks in order
    ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  }
  store_.reset();
  const std::string data = dir_ + "/ssd/strata-ssd.data";
  ASSERT_TRUE(std::filesystem::exists(data));
  const int64_t block = ChunkLayout{.layers = 2, .chunk_tokens = 4, .row_bytes = 8}.BlockBytes();
  // Cut after the sixth block: the first three sessions' chunks remain (the probe's blocks
  // were given back before any session was written).
  std::filesystem::resize_file(data, 6 * block);
  MakeTiered(16, 64);
  SessionStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.unbacked_records, 3);
  EXPECT_EQ(stats.ssd_sessions, 3);
  for (int i = 0; i < 6; ++i) {
    SessionKey key{"t", "s" + std::to_string(i)};
    if (i < 3) {
      EXPECT_EQ(ReadAndCheck(key, 8), 8) << key.session_id;
    } else {
      EXPECT_TRUE(absl::IsNotFound(store_->Get(key).status())) << key.session_id << " is advertised";
    }
  }
  store_.reset();
  std::filesystem::remove(data);
  MakeTiered(16, 64);
  EXPECT_EQ(store_->Stats().unbacked_records, 3);
  EXPECT_EQ(store_->Stats().ssd_sessions, 0);
}

// A damaged index never stops the store: it is repaired (here from its log), counted and
// the damaged copy kept aside; the persisted sessions come back bit-exact.
TEST_F(DurabilityTest, ADamagedIndexIsRepairedAndTheStoreStarts) {
  Make(16, 64);
  for (int i = 0; i < 3; ++i) {
    SessionKey key{"t", "s" + std::to_string(i)};
    ASSERT_TRUE(SaveAll(key, Iota(8), 0).ok());
    ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  }
  store_.reset();
  std::ofstream(dir_ + "/index/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";  // names no manifest
  MakeTiered(16, 64);
  ASSERT_NE(store_, nullptr);
  EXPECT_TRUE(store_->Stats().index_damaged);
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    aside += e.path().filename().string().starts_with("index.damaged-");
  }
  EXPECT_EQ(aside, 1) << "the damaged index was not kept for inspection";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadAndCheck({"t", "s" + std::to_string(i)}, 8), 8);
  MakeTiered(16, 64);
  EXPECT_FALSE(store_->Stats().index_damaged) << "a repaired index is healthy at the next start";
}

// Two records naming one block (a record of a write whose Put failed, replayed by the index
// after its blocks went to another session): the newer record keeps the block, the older
// is dropped at start, and nothing done on the older one's account touches the newer's.
TEST_F(DurabilityTest, ABlockTwoRecordsNameBelongsToTheNewerRecord) {
  Make(8, 64);
  SessionKey a{"t", "a"}, b{"t", "b"};
  ASSERT_TRUE(SaveAll(a, Iota(4, 100), 0, /*salt=*/1).ok());
  ASSERT_TRUE(store_->Flush(a, absl::Seconds(10)).ok());
  ASSERT_TRUE(SaveAll(b, Iota(4, 200), 0, /*salt=*/2).ok());
  ASSERT_TRUE(store_->Flush(b, absl::Seconds(10)).ok());
  store_.reset();
  {
    auto index = SessionIndex::Open(dir_ + "/index");
    ASSERT_TRUE(index.ok()) << index.status();
    auto ra = (*index)->Get("t", "a");
    auto rb = (*index)->Get("t", "b");
    ASSERT_TRUE(ra.ok() && rb.ok());
    ASSERT_LT(ra->generation, rb->generation);
    SessionRecord stale = *ra;
    stale.chunks[0].file = rb->chunks[0].file;
    stale.chunks[0].offset = rb->chunks[0].offset;
    ASSERT_TRUE((*index)->Put(stale).ok());
  }
  MakeTiered(8, 64);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(a).status())) << "the older record is served";
  { (void)store_->Lease(a, 4); }  // (a's block fails its check: a is cut, its blocks freed)
  ASSERT_TRUE(store_->AwaitWriteBacks(absl::Seconds(10)).ok());
  EXPECT_EQ(ReadAndCheck(b, 4, /*salt=*/2), 4);
  MakeTiered(8, 64);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(a).status())) << "the older record was not deleted";
  EXPECT_EQ(ReadAndCheck(b, 4, /*salt=*/2), 4) << "b's block was freed or erased on a's account";
}

// A log cut short at its end loses acknowledged sessions without RocksDB saying so: the
// store reports how many writes were lost (strata_index_lost_writes_at_start), once, and
// rebuilds the index from the SSD data file, which still holds every lost session.
TEST_F(DurabilityTest, ALogCutShortAtItsEndIsReportedNotSilent) {
  Make(16, 64);
  auto persist = [&](int first, int n) {
    for (int i = first; i < first + n; ++i) {
      SessionKey key{"t", "s" + std::to_string(i)};
      ASSERT_TRUE(SaveAll(key, Iota(8), 0).ok());
      ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
    }
  };
  persist(0, 3);
  MakeTiered(16, 64);
  EXPECT_EQ(store_->Stats().index_lost_writes, 0) << "a clean restart lost nothing";
  persist(3, 3);  // into the log the restart began (the first three are in a table now)
  store_.reset();
  std::filesystem::path log;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/index")) {
    if (e.path().extension() == ".log" && (log.empty() || e.path().filename() > log.filename())) log = e.path();
  }
  ASSERT_FALSE(log.empty());
  std::filesystem::resize_file(log, std::filesystem::file_size(log) / 2);
  MakeTiered(16, 64);
  ASSERT_NE(store_, nullptr);
  const int64_t lost = store_->Stats().index_lost_writes;
  EXPECT_GT(lost, 0) << "acknowledged sessions vanished silently";
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ReadAndCheck({"t", "s" + std::to_string(i)}, 8), 8) << "session " << i;
  MakeTiered(16, 64);
  EXPECT_EQ(store_->Stats().index_lost_writes, 0) << "a loss is reported at one start only";
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 0) << "the rebuilt index is whole";
}

}  // namespace
}  // namespace strata::storage
