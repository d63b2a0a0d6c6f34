// The store on a full file system (a small ext4 of its own, loop-mounted: the tests skip,
// saying so, without root): the index cannot be written, and still nothing acknowledged is
// lost or brought back. A lost index's data waits for the rebuild at a start with room; a
// damaged one does not stop the store; a session dropped meanwhile stays dropped across a
// restart.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/testing/small_file_system.h"
#include "storage/testing/store_fixture.h"

namespace strata::storage {
namespace {

// Less than the index needs to be opened for writing (SessionIndex::kMinFreeBytes).
constexpr int64_t kLeft = int64_t{8} << 20;

class FullDiskTest : public TieredStoreTest {
 protected:
  void SetUp() override {
    if (std::string why = fs_.Mount(tmp_.path(), 64); !why.empty()) GTEST_SKIP() << "full-disk test skipped: " << why;
    dir_ = fs_.path();
    TieredStoreTest::SetUp();
  }
  void Persist(int sessions) {
    for (int i = 0; i < sessions; ++i) {
      SessionKey key{"t", "s" + std::to_string(i)};
      ASSERT_TRUE(SaveAll(key, Iota(8, 100 * i), 0, i).ok());
      ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
    }
  }
  // `sessions` persisted, then the store started again on the disk filled up.
  void PersistThenRestartFull(int sessions) {
    MakeTiered(8, 64);
    Persist(sessions);
    store_.reset();
    ASSERT_TRUE(fs_.Fill(kLeft));
    MakeTiered(8, 64);
  }
  // Flush, once the store writes to SSD again (it tries every 10 s): FailedPrecondition
  // until then.
  absl::Status FlushOnceWritable(const SessionKey& key) {
    absl::Status flushed;
    for (int i = 0; i < 30; ++i) {
      flushed = store_->Flush(key, absl::Seconds(1));
      if (!absl::IsFailedPrecondition(flushed)) return flushed;
      absl::SleepFor(absl::Seconds(1));
    }
    return flushed;
  }
  testing::SmallFileSystem fs_;
};

// The index is lost and the disk full at a start: nothing can rebuild it then, and nothing
// in that run (its SSD probe, write-backs once there is room) takes the blocks the rebuild
// needs; the next start rebuilds every session.
TEST_F(FullDiskTest, ALostIndexOnAFullDiskIsRebuiltAtTheNextStartWithRoom) {
  MakeTiered(8, 64);
  Persist(3);
  store_.reset();
  std::filesystem::remove_all(dir_ + "/index");
  ASSERT_TRUE(fs_.Fill(kLeft));
  MakeTiered(8, 64);
  EXPECT_TRUE(store_->Stats().ssd_degraded);
  EXPECT_EQ(store_->Stats().ssd_sessions, 0) << "served without an index";
  fs_.Unfill();
  // Room again in this run: new sessions are written back, elsewhere than the lost ones.
  SessionKey fresh{"u", "fresh"};
  ASSERT_TRUE(SaveAll(fresh, Iota(8, 900), 0, 7).ok());
  EXPECT_TRUE(FlushOnceWritable(fresh).ok());
  MakeTiered(8, 64);
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 4) << "the three lost, and the one written since";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadAndCheck({"t", "s" + std::to_string(i)}, 8, i), 8) << i;
  EXPECT_EQ(ReadAndCheck(fresh, 8, 7), 8);
}

// A damaged index on a full disk: the store starts (host-only caching) and repairs it at
// the next start with room.
TEST_F(FullDiskTest, ADamagedIndexOnAFullDiskDoesNotStopTheStore) {
  MakeTiered(8, 64);
  Persist(2);
  store_.reset();
  std::ofstream(dir_ + "/index/CURRENT", std::ios::trunc) << "garbage\n";
  ASSERT_TRUE(fs_.Fill(kLeft));
  MakeTiered(8, 64);
  ASSERT_NE(store_, nullptr);
  EXPECT_TRUE(store_->Stats().ssd_degraded);
  EXPECT_TRUE(store_->Stats().index_damaged);
  SessionKey key{"u", "host-only"};
  ASSERT_TRUE(SaveAll(key, Iota(8), 0).ok());
  EXPECT_EQ(ReadAndCheck(key, 8), 8);
  store_.reset();
  fs_.Unfill();
  MakeTiered(8, 64);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(ReadAndCheck({"t", "s" + std::to_string(i)}, 8, i), 8) << i;
}

// A session dropped while the index cannot be written, then a restart before it can: the
// session does not come back.
TEST_F(FullDiskTest, ADropOnAFullDiskStaysDroppedAcrossARestart) {
  ASSERT_NO_FATAL_FAILURE(PersistThenRestartFull(2));
  SessionKey dropped{"t", "s0"};
  ASSERT_TRUE(store_->Get(dropped).ok());
  ASSERT_TRUE(store_->Drop(dropped).ok());
  ASSERT_TRUE(store_->AwaitWriteBacks(absl::Seconds(10)).ok());
  store_.reset();
  MakeTiered(8, 64);  // still full
  EXPECT_TRUE(absl::IsNotFound(store_->Get(dropped).status())) << "a dropped session came back";
  EXPECT_EQ(ReadAndCheck({"t", "s1"}, 8, 1), 8);
  store_.reset();
  fs_.Unfill();
  MakeTiered(8, 64);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(dropped).status())) << "a dropped session came back";
  EXPECT_EQ(ReadAndCheck({"t", "s1"}, 8, 1), 8);
}

// A session dropped and saved anew while the index is read-only: once it is writable again
// the old record goes before the new one is put, so the new version is what persists.
TEST_F(FullDiskTest, ASessionDroppedAndSavedAnewOnAFullDiskKeepsItsNewVersion) {
  ASSERT_NO_FATAL_FAILURE(PersistThenRestartFull(1));
  SessionKey key{"t", "s0"};
  ASSERT_TRUE(store_->Drop(key).ok());
  ASSERT_TRUE(SaveAll(key, Iota(12, 500), 0, /*salt=*/5).ok());
  fs_.Unfill();
  ASSERT_TRUE(FlushOnceWritable(key).ok()) << "persisting did not resume";
  ASSERT_TRUE(store_->AwaitWriteBacks(absl::Seconds(10)).ok());
  MakeTiered(8, 64);
  auto info = store_->Get(key);
  ASSERT_TRUE(info.ok()) << "the new version was deleted with the old record: " << info.status();
  EXPECT_EQ(info->cached_tokens, 12);
  EXPECT_EQ(ReadAndCheck(key, 12, 5), 12);
}

}  // namespace
}  // namespace strata::storage
