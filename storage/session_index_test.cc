#include "storage/session_index.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "storage/testing/index_damage.h"
#include "rocksdb/db.h"
#include "storage/acked_writes.h"
#include "storage/testing/temp_dir.h"
#include "storage/write_journal.h"

namespace strata::storage {
namespace {

SessionRecord Record(const std::string& tenant, const std::string& id, int tokens) {
  SessionRecord r;
  r.tenant = tenant;
  r.session_id = id;
  r.model_fingerprint = 0xfeedbeef;
  for (int i = 0; i < tokens; ++i) r.tokens.push_back(i * 3 - 7);
  for (int c = 0; c * 4 < tokens; ++c) {
    r.chunks.push_back(IndexedChunk{static_cast<uint32_t>(c % 2), static_cast<uint64_t>(c) * 8192,
                                    static_cast<uint32_t>(std::min(4, tokens - c * 4)),
                                    0x1234567890abcdefull + static_cast<uint64_t>(c)});
  }
  r.last_access_unix_ms = 1700000000000;
  r.expires_unix_ms = 1700086400000;
  return r;
}

TEST(SessionRecordTest, RoundTrips) {
  SessionRecord r = Record("tenant", "session", 10);
  auto back = DecodeSessionRecord(EncodeSessionRecord(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
}

TEST(SessionRecordTest, EveryFlippedByteAndEveryTruncationIsDataLoss) {
  const std::string bytes = EncodeSessionRecord(Record("t", "s", 9));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_TRUE(absl::IsDataLoss(DecodeSessionRecord(bad).status())) << "flipped byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_TRUE(absl::IsDataLoss(DecodeSessionRecord(bytes.substr(0, n)).status())) << "cut at " << n;
  }
}

class SessionIndexTest : public ::testing::Test {
 protected:
  std::unique_ptr<SessionIndex> Open() {
    auto idx = SessionIndex::Open(dir_ / "index");
    EXPECT_TRUE(idx.ok()) << idx.status();
    return idx.ok() ? *std::move(idx) : nullptr;
  }
  std::map<std::string, SessionRecord> All(SessionIndex& idx, std::vector<std::string>* bad = nullptr) {
    std::map<std::string, SessionRecord> out;
    absl::Status s = idx.ForEach([&](const SessionRecord& r) { out[r.tenant + "/" + r.session_id] = r; },
                                 [&](std::string_view key, const absl::Status&) {
                                   if (bad != nullptr) bad->emplace_back(key);
                                 });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  testing::TempDir dir_{"strata-index"};
};

TEST_F(SessionIndexTest, RecordsSurviveReopen) {
  {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    ASSERT_TRUE(idx->Put(Record("a", "one", 5)).ok());
    ASSERT_TRUE(idx->Put(Record("a", "two", 12)).ok());
    ASSERT_TRUE(idx->Put(Record("b", "one", 3)).ok());
    ASSERT_TRUE(idx->Put(Record("a", "two", 13)).ok());  // replaces
    ASSERT_TRUE(idx->Delete("b", "one").ok());
    EXPECT_TRUE(absl::IsNotFound(idx->Delete("b", "one")));
  }
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  auto all = All(*idx);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all["a/one"], Record("a", "one", 5));
  EXPECT_EQ(all["a/two"], Record("a", "two", 13));
  auto got = idx->Get("a", "two");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->tokens.size(), 13u);
  EXPECT_TRUE(absl::IsNotFound(idx->Get("b", "one").status()));
  EXPECT_TRUE(absl::IsNotFound(idx->Get("b", "a").status())) << "tenants are separate";
}

TEST_F(SessionIndexTest, DamagedRecordsAreReportedNotTrusted) {
  {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    ASSERT_TRUE(idx->Put(Record("t", "good", 6)).ok());
  }
  {
    // Damage one record and store a good one under another session's key.
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_ / "index", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string damaged = EncodeSessionRecord(Record("t", "damaged", 6));
    damaged[damaged.size() / 2] ^= 1;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), SessionIndex::Key("t", "damaged"), damaged).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), SessionIndex::Key("t", "moved"),
                        EncodeSessionRecord(Record("t", "good", 6))).ok());
  }
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  std::vector<std::string> bad;
  auto all = All(*idx, &bad);
  EXPECT_EQ(all.size(), 1u);
  EXPECT_EQ(all.count("t/good"), 1u);
  ASSERT_EQ(bad.size(), 2u);
  for (const std::string& key : bad) EXPECT_TRUE(idx->DeleteKey(key).ok());
  bad.clear();
  All(*idx, &bad);
  EXPECT_TRUE(bad.empty());
  EXPECT_TRUE(absl::IsDataLoss(DecodeSessionRecord("garbage that is long enough").status()));
}

// Damage to the database itself is never fatal: the index opens (repaired, replayed
// skipping damaged log records, or empty), says what it did, and keeps a copy aside.
class DamagedIndexTest : public SessionIndexTest {
 protected:
  // Ten records, each written (and synced) on its own into the log.
  void Fill() {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(idx->Put(Record("t", "s" + std::to_string(i), 40)).ok());
  }
  std::filesystem::path FileNamed(const std::string& prefix, const std::string& suffix) {
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "index")) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(prefix) && name.ends_with(suffix)) return e.path();
    }
    return {};
  }
  static void FlipBytes(const std::filesystem::path& p, double where, int n) { testing::FlipFileBytes(p, where, n); }
  int SetAside() {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      n += e.path().filename().string().starts_with("index.damaged-");
    }
    return n;
  }
};

TEST_F(DamagedIndexTest, DamageInTheMiddleOfTheLogIsReportedNotSilent) {
  Fill();
  const std::filesystem::path log = FileNamed("", ".log");
  ASSERT_FALSE(log.empty());
  FlipBytes(log, 0.5, 4);
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_NE(idx->damage_note(), "") << "damage in the log passed silently";
  EXPECT_EQ(SetAside(), 1);
  // The records before the damage are kept; RocksDB drops the rest of the damaged 32 KiB
  // log block with it (all ten records share one block here).
  const size_t kept = All(*idx).size();
  EXPECT_GE(kept, 4u);
  EXPECT_LT(kept, 10u);
  EXPECT_TRUE(idx->Put(Record("t", "after", 4)).ok()) << "the index must be writable again";
}

TEST_F(DamagedIndexTest, AGarbledOrMissingCurrentFileIsRepaired) {
  for (bool remove : {false, true}) {
    SCOPED_TRACE(remove ? "CURRENT deleted" : "CURRENT garbled");
    std::filesystem::remove_all(dir_ / "index");
    Fill();
    if (remove) {
      std::filesystem::remove(dir_ / "index/CURRENT");
    } else {
      std::ofstream(dir_ / "index/CURRENT", std::ios::trunc) << "garbage\n";
    }
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    EXPECT_NE(idx->damage_note(), "");
    EXPECT_EQ(All(*idx).size(), 10u) << "a repair from the log keeps every record";
  }
}

TEST_F(DamagedIndexTest, AFlippedByteInTheManifestIsRepaired) {
  Fill();
  const std::filesystem::path manifest = FileNamed("MANIFEST-", "");
  ASSERT_FALSE(manifest.empty());
  FlipBytes(manifest, 0.3, 1);
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_NE(idx->damage_note(), "");
  EXPECT_EQ(All(*idx).size(), 10u);
}

// An index rebuilt from the data file replaces everything the index held, in one synced
// batch; the index as found is kept when asked; nothing is reported lost afterwards.
TEST_F(DamagedIndexTest, StartOverReplacesEveryRecord) {
  Fill();
  std::vector<SessionRecord> rebuilt = {Record("t", "s1", 12), Record("u", "new", 5), Record("t", "s9", 41)};
  rebuilt[0].generation = 7;
  {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    EXPECT_FALSE(idx->created_at_open());
    EXPECT_FALSE(idx->Empty());
    std::string aside;
    ASSERT_TRUE(idx->StartOver(rebuilt, /*set_aside=*/true, &aside).ok());
    EXPECT_FALSE(aside.empty());
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(aside) / "CURRENT")) << aside;
    EXPECT_EQ(SetAside(), 1);
    auto all = All(*idx);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all["t/s1"], rebuilt[0]);
    EXPECT_TRUE(idx->Put(Record("t", "after", 4)).ok()) << "the index must be writable";
  }
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->lost_writes(), 0) << idx->lost_note();
  EXPECT_EQ(idx->damage_note(), "");
  auto all = All(*idx);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(all["u/new"], rebuilt[1]);
  EXPECT_EQ(all.count("t/s0"), 0u) << "a record the rebuild did not name survived it";
}

TEST_F(SessionIndexTest, AMissingIndexIsCreatedAndSaysSo) {
  {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    EXPECT_TRUE(idx->created_at_open());
    EXPECT_TRUE(idx->Empty());
    ASSERT_TRUE(idx->Put(Record("t", "s", 4)).ok());
    EXPECT_FALSE(idx->Empty());
  }
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_FALSE(idx->created_at_open());
}

// A dying disk: every sync of the index's files fails. A write reports the error and the
// index refuses writes from then on; nothing aborts (RocksDB's own info log on the same
// disk would trip an assertion in Debian's build: the index logs through strata's log).
TEST(SessionIndexFaultTest, FailingSyncsReportErrorsAndTakeNothingDown) {
  testing::TempDir dir;
  auto journal = WriteJournal::Open(dir.path() + "/journal");
  ASSERT_TRUE(journal.ok()) << journal.status();
  auto index = SessionIndex::Open(dir.path() + "/index", journal->get());
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_TRUE((*index)->Put(Record("t", "kept", 8)).ok());
  (*journal)->FailIndexSyncs(true);
  for (int i = 0; i < 20; ++i) {
    absl::Status put = (*index)->Put(Record("t", "lost-" + std::to_string(i), 8));
    EXPECT_FALSE(put.ok()) << "a write whose sync failed reported success";
  }
  EXPECT_TRUE((*index)->read_only());
  EXPECT_TRUE((*index)->Get("t", "kept").ok());
  EXPECT_FALSE((*index)->Delete("t", "kept").ok());
  (*journal)->FailIndexSyncs(false);
  index->reset();
  auto reopened = SessionIndex::Open(dir.path() + "/index");
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_TRUE((*reopened)->Get("t", "kept").ok());
}

TEST(AckedWritesTest, SlotsRoundTripAndDamageIsDataLoss) {
  AckedWrites::State state;
  state.generation = 7;
  state.sequence = 42;
  state.recent = {{41, false, SessionIndex::Key("t", "a")}, {42, true, SessionIndex::Key("t", "b")}};
  const std::string slot = AckedWrites::EncodeSlot(state);
  absl::StatusOr<AckedWrites::State> back = AckedWrites::DecodeSlot(slot);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->generation, 7u);
  EXPECT_EQ(back->sequence, 42u);
  EXPECT_EQ(back->recent, state.recent);
  for (size_t i = 0; i < slot.size(); ++i) {
    std::string bad = slot;
    bad[i] ^= 0x10;
    EXPECT_FALSE(AckedWrites::DecodeSlot(bad).ok()) << "a flipped byte at " << i << " passed";
  }
  EXPECT_FALSE(AckedWrites::DecodeSlot(slot.substr(0, slot.size() - 1)).ok());
}

// A log cut short at its end is what RocksDB takes for a crash's torn tail; the record of
// acknowledged writes kept beside the index tells them apart.
class LostWritesTest : public DamagedIndexTest {
 protected:
  // The newest write-ahead log.
  std::filesystem::path NewestLog() {
    std::filesystem::path newest;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "index")) {
      if (e.path().extension() == ".log" && (newest.empty() || e.path().filename() > newest.filename())) {
        newest = e.path();
      }
    }
    return newest;
  }
};

TEST_F(LostWritesTest, ALogCutShortAtItsEndIsReportedWithTheLostSessions) {
  Fill();
  const std::filesystem::path log = NewestLog();
  ASSERT_FALSE(log.empty());
  std::filesystem::resize_file(log, std::filesystem::file_size(log) / 2);
  {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    const size_t kept = All(*idx).size();
    ASSERT_LT(kept, 10u) << "the cut took no record; the test cuts nothing";
    EXPECT_EQ(idx->lost_writes(), static_cast<int64_t>(10 - kept)) << idx->lost_note();
    ASSERT_EQ(idx->lost_named().size(), 10 - kept) << "ten writes fit the record's recent keys";
    for (size_t i = 0; i < idx->lost_named().size(); ++i) {
      EXPECT_EQ(idx->lost_named()[i], (LostWrite{"t", "s" + std::to_string(kept + i), false}));
    }
    EXPECT_NE(idx->lost_note().find("t/s9"), std::string::npos) << idx->lost_note();
    EXPECT_TRUE(idx->Put(Record("t", "after", 4)).ok());
  }
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->lost_writes(), 0) << "a loss is reported once: " << idx->lost_note();
  EXPECT_EQ(idx->lost_note(), "");
}

TEST_F(LostWritesTest, ALostDeletionIsNamed) {
  Fill();
  {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    ASSERT_TRUE(idx->Delete("t", "s3").ok());
  }
  // Only the deletion's bytes go (the log ends with it).
  const std::filesystem::path log = NewestLog();
  ASSERT_FALSE(log.empty());
  std::filesystem::resize_file(log, std::filesystem::file_size(log) - 4);
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->lost_writes(), 1) << idx->lost_note();
  EXPECT_EQ(idx->lost_named(), (std::vector<LostWrite>{{"t", "s3", true}}));
  EXPECT_TRUE(idx->Get("t", "s3").ok()) << "the lost deletion should have left the record";
}

TEST_F(LostWritesTest, ACleanReopenReportsNothing) {
  Fill();
  for (int i = 0; i < 3; ++i) {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    EXPECT_EQ(idx->lost_writes(), 0) << idx->lost_note();
    EXPECT_EQ(idx->lost_note(), "");
    EXPECT_EQ(All(*idx).size(), 10u - i);
    ASSERT_TRUE(idx->Delete("t", "s" + std::to_string(i)).ok());
  }
}

// SIGKILL keeps the page cache: whatever was acknowledged is there, and nothing is reported.
TEST_F(LostWritesTest, AKilledWriterReportsNothing) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot run a child forked from a process with threads (RocksDB's); the plain "
                  "and ASan runs cover this";
#endif
  Fill();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto idx = SessionIndex::Open(dir_ / "index");
    if (!idx.ok()) _exit(1);
    for (int i = 10; i < 20; ++i) {
      if (!(*idx)->Put(Record("t", "s" + std::to_string(i), 40)).ok()) _exit(1);
    }
    kill(getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed before the kill, status " << status;
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->lost_writes(), 0) << idx->lost_note();
  EXPECT_EQ(All(*idx).size(), 20u);
}

// A power cut can take back the record's own last writes (they come after the index's
// sync): a record behind the index checks less, and reports nothing.
TEST_F(LostWritesTest, ARecordBehindTheIndexReportsNothing) {
  const std::filesystem::path record = std::filesystem::path(dir_ / "index") / AckedWrites::kFileName;
  {
    auto idx = Open();
    ASSERT_NE(idx, nullptr);
    ASSERT_TRUE(idx->Put(Record("t", "first", 4)).ok());
  }
  const std::filesystem::path kept = dir_ / "record-after-one-write";
  std::filesystem::copy_file(record, kept);
  Fill();
  std::filesystem::copy_file(kept, record, std::filesystem::copy_options::overwrite_existing);
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->lost_writes(), 0) << idx->lost_note();
  std::filesystem::remove(record);
  idx.reset();
  idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->lost_writes(), 0) << "no record at all checks nothing: " << idx->lost_note();
}

// A write torn in the record's newer slot leaves the older one.
TEST_F(LostWritesTest, ATornRecordSlotFallsBackToTheOther) {
  Fill();
  const std::filesystem::path record = std::filesystem::path(dir_ / "index") / AckedWrites::kFileName;
  auto before = AckedWrites::Open(dir_ / "index");
  ASSERT_TRUE(before.ok());
  const uint64_t newest = (*before)->found().generation;
  FlipBytes(record, (newest % 2 == 0 ? 0.0 : 0.5) + 0.01, 1);
  auto after = AckedWrites::Open(dir_ / "index");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)->found().generation, newest - 1);
  auto idx = Open();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->lost_writes(), 0) << idx->lost_note();
}

}  // namespace
}  // namespace strata::storage
