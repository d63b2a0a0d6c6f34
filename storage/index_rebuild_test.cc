// A lost index is rebuilt from the SSD data file's chunk headers (index_rebuild.h): every
// session acknowledged as persisted comes back bit-exact (tokens, base and KV) whatever
// happened to the index; a version that is half written, or fails its checksum, never
// comes back, nor mixed with another; what left the store stays gone; and the rebuilt
// sessions' blocks are never handed out again while they hold them.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/chunk_format.h"
#include "storage/testing/index_damage.h"
#include "storage/testing/store_fixture.h"
#include "xxhash.h"

namespace strata::storage {
namespace {

using testing::IndexDamage;

// The SSD data file of a stopped store, read and written behind its back.
class DataFile {
 public:
  DataFile(std::string path, const ChunkLayout& layout) : path_(std::move(path)), layout_(layout) {}

  int64_t blocks() const { return static_cast<int64_t>(std::filesystem::file_size(path_)) / layout_.BlockBytes(); }

  std::vector<std::byte> Read(int64_t block) const {
    std::vector<std::byte> bytes(static_cast<size_t>(layout_.BlockBytes()));
    const int fd = open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), block * layout_.BlockBytes()), static_cast<ssize_t>(bytes.size()));
    close(fd);
    return bytes;
  }

  void Write(int64_t block, const std::vector<std::byte>& bytes) const {
    const int fd = open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), block * layout_.BlockBytes()), static_cast<ssize_t>(bytes.size()));
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
  }

  // What the block's header page says, when it holds a chunk of this model at all.
  absl::StatusOr<DescribedChunk> Describe(int64_t block) const {
    const std::vector<std::byte> bytes = Read(block);
    return ReadChunkHeaderPage(layout_, kFingerprint, absl::Span<const std::byte>(bytes).subspan(0, kChunkHeaderBytes));
  }

  // The blocks holding chunks of `key`, by generation, each in chunk order.
  std::map<uint64_t, std::vector<int64_t>> VersionsOf(const SessionKey& key) const {
    std::map<uint64_t, std::map<uint32_t, int64_t>> found;
    for (int64_t b = 0; b < blocks(); ++b) {
      absl::StatusOr<DescribedChunk> c = Describe(b);
      if (!c.ok() || !c->descriptor.has_value()) continue;
      if (c->descriptor->tenant == key.tenant && c->descriptor->session_id == key.session_id) {
        found[c->descriptor->generation][c->descriptor->chunk_index] = b;
      }
    }
    std::map<uint64_t, std::vector<int64_t>> out;
    for (const auto& [generation, chunks] : found) {
      for (const auto& [index, block] : chunks) out[generation].push_back(block);
    }
    return out;
  }

  // Blocks holding any chunk header (of any model, sealed or not, damaged or not).
  int64_t ChunkHeaders() const {
    int64_t n = 0;
    for (int64_t b = 0; b < blocks(); ++b) n += !absl::IsNotFound(Describe(b).status());
    return n;
  }

  // A block holding no chunk header, not in `taken`.
  int64_t FreeBlock(const std::set<int64_t>& taken) const {
    for (int64_t b = 0; b < blocks(); ++b) {
      if (!taken.contains(b) && absl::IsNotFound(Describe(b).status())) return b;
    }
    ADD_FAILURE() << "no free block in " << path_;
    return -1;
  }

  // Rewrites the block's header as format 1 wrote it: no descriptor, the checksum over
  // the header alone.
  void MakeFormatOne(int64_t block) const {
    std::vector<std::byte> bytes = Read(block);
    ChunkHeader h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    h.version = 1;
    h.descriptor_bytes = 0;
    std::memset(bytes.data(), 0, kChunkHeaderBytes);
    h.header_checksum = XXH3_64bits(&h, offsetof(ChunkHeader, header_checksum));
    std::memcpy(bytes.data(), &h, sizeof(h));
    Write(block, bytes);
  }

  void FlipPayloadByte(int64_t block) const {
    std::vector<std::byte> bytes = Read(block);
    bytes[kChunkHeaderBytes + 3] ^= std::byte{0x40};
    Write(block, bytes);
  }

  // Writes chunks `which` of a version of `key` holding `tokens` (KV as SaveAll writes it
  // with `salt`) into free blocks, as a write-back of that generation would have, and
  // returns their blocks.
  std::vector<int64_t> WriteVersion(const SessionKey& key, const std::vector<int32_t>& tokens, int salt,
                                    uint64_t generation, const std::vector<int>& which) const {
    std::vector<int64_t> written;
    std::set<int64_t> taken;
    const int ct = layout_.chunk_tokens;
    const int count = (static_cast<int>(tokens.size()) + ct - 1) / ct;
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());  // one last access for the whole version
    for (int c : which) {
      std::vector<std::byte> block(static_cast<size_t>(layout_.BlockBytes()), std::byte{0});
      absl::Span<std::byte> span(block);
      const int first = c * ct;
      const int n = std::min(ct, static_cast<int>(tokens.size()) - first);
      for (int i = 0; i < n; ++i)
        for (int l = 0; l < layout_.layers; ++l)
          for (int kv = 0; kv < 2; ++kv)
            std::memset(ChunkPayload(span) + layout_.RowOffset(l, kv, i),
                        static_cast<int>(RowByte(first + i, l, kv, salt)), static_cast<size_t>(layout_.row_bytes));
      WriteChunkHeader(layout_, kFingerprint, n, span);
      ChunkDescriptor d;
      d.tenant = key.tenant;
      d.session_id = key.session_id;
      d.generation = generation;
      d.last_access_unix_ms = now_ms;
      d.session_tokens = static_cast<uint32_t>(tokens.size());
      d.chunk_index = static_cast<uint32_t>(c);
      d.chunk_count = static_cast<uint32_t>(count);
      d.tokens.assign(tokens.begin() + first, tokens.begin() + first + n);
      EXPECT_TRUE(SealChunkHeader(span, ChunkPayloadChecksum(layout_, span), d));
      const int64_t at = FreeBlock(taken);
      taken.insert(at);
      Write(at, block);
      written.push_back(at);
    }
    return written;
  }

 private:
  const std::string path_;
  const ChunkLayout layout_;
};

class IndexRebuildTest : public TieredStoreTest {
 protected:
  static constexpr int64_t kHostChunks = 16;
  static constexpr int64_t kSsdChunks = 64;

  void Start() { MakeTiered(kHostChunks, kSsdChunks); }
  std::string IndexDir() const { return dir_ + "/index"; }
  DataFile Data() const { return DataFile(dir_ + "/ssd/strata-ssd.data", store_layout_); }

  void Persist(const SessionKey& key, const std::vector<int32_t>& tokens, int64_t keep = 0, int salt = 0,
               std::string_view base = {}) {
    ASSERT_TRUE(SaveAll(key, tokens, keep, salt, base).ok());
    ASSERT_TRUE(store_->Flush(key, absl::Seconds(10)).ok());
  }

  // The store holds `key` as exactly `tokens` on `base`, persisted, with the KV SaveAll
  // wrote with `salt`, read back from SSD.
  void ExpectSession(const SessionKey& key, const std::vector<int32_t>& tokens, int salt = 0,
                     std::string_view base = {}) {
    SCOPED_TRACE(key.tenant + "/" + key.session_id);
    const int64_t n = static_cast<int64_t>(tokens.size());
    auto info = store_->Get(key);
    ASSERT_TRUE(info.ok()) << "not rebuilt: " << info.status();
    EXPECT_TRUE(info->persisted);
    EXPECT_EQ(info->cached_tokens, n);
    EXPECT_EQ(info->base, base);
    EXPECT_EQ(store_->Match(key, tokens, n, base).tokens, n) << "its tokens differ";
    std::vector<int32_t> other = tokens;
    other.back() += 1;
    EXPECT_EQ(store_->Match(key, other, n, base).tokens, n - 1) << "it holds more than its tokens";
    EXPECT_EQ(ReadAndCheck(key, n, salt), n);
  }

  int64_t SsdBlocksUsed() const { return store_->Stats().ssd_used_bytes / store_layout_.BlockBytes(); }

  const ChunkLayout store_layout_{.layers = 2, .chunk_tokens = 4, .row_bytes = 8};
};

// The sessions of the damage tests: two tenants, one chunk to five, a partial last chunk,
// a base, a session saved twice (kept chunks carry the second version's descriptor), one
// pushed out of the host tier (held only on SSD), and one dropped (which must stay gone).
struct Saved {
  SessionKey key;
  std::vector<int32_t> tokens;
  int salt = 0;
  std::string base;
};

std::vector<Saved> LiveSessions() {
  return {
      {{"t0", "one-chunk"}, Iota(3, 10), 1, ""},
      {{"t0", "five-chunks"}, Iota(19, 200), 2, ""},
      {{"t0", "on-a-base"}, Iota(9, 400), 3, "sp:42"},
      {{"t1", "one-chunk"}, Iota(4, 600), 4, ""},  // same id, another tenant
      {{"t1", "saved-twice"}, Iota(14, 800), 0, ""},
      {{"t1", "on-ssd-only"}, Iota(8, 900), 5, ""},
  };
}

class IndexDamageRebuildTest : public IndexRebuildTest, public ::testing::WithParamInterface<IndexDamage> {};

TEST_P(IndexDamageRebuildTest, EveryAcknowledgedSessionComesBackBitExact) {
  Start();
  for (const Saved& s : LiveSessions()) {
    if (s.key.session_id == "saved-twice") {
      Persist(s.key, Iota(9, 800));                          // 3 chunks
      Persist(s.key, s.tokens, /*keep=*/8, s.salt, s.base);  // keeps 2, writes all 4
    } else {
      Persist(s.key, s.tokens, 0, s.salt, s.base);
    }
  }
  Persist({"t0", "dropped"}, Iota(6, 50), 0, 9);
  ASSERT_TRUE(store_->Drop({"t0", "dropped"}).ok());
  // Pushes the first sessions' host copies out: they are served from SSD alone.
  ASSERT_TRUE(SaveAll({"t2", "filler"}, Iota(4 * kHostChunks - 4, 1000), 0).ok());
  ASSERT_TRUE(store_->Flush({"t2", "filler"}, absl::Seconds(10)).ok());
  ASSERT_TRUE(store_->Drop({"t2", "filler"}).ok());
  ASSERT_TRUE(store_->AwaitWriteBacks(absl::Seconds(10)).ok());
  const int64_t used = SsdBlocksUsed();
  store_.reset();

  testing::DamageIndex(IndexDir(), GetParam());
  Start();
  const SessionStoreStats stats = store_->Stats();
  const bool damaged = GetParam() == IndexDamage::kGarbledCurrent || GetParam() == IndexDamage::kFlippedManifestByte ||
                       GetParam() == IndexDamage::kDamagedLog;
  EXPECT_EQ(stats.index_damaged, damaged);
  if (GetParam() == IndexDamage::kLogCutShort) EXPECT_GT(stats.index_lost_writes, 0);
  EXPECT_EQ(stats.index_rebuilt_sessions, static_cast<int64_t>(LiveSessions().size()));
  EXPECT_EQ(stats.index_rebuild_skipped_sessions, 0);
  EXPECT_EQ(stats.ssd_sessions, static_cast<int64_t>(LiveSessions().size()));
  EXPECT_EQ(SsdBlocksUsed(), used) << "the rebuilt index names other blocks than the lost one did";
  for (const Saved& s : LiveSessions()) ExpectSession(s.key, s.tokens, s.salt, s.base);
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t0", "dropped"}).status())) << "a dropped session came back";
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t2", "filler"}).status())) << "a dropped session came back";
  EXPECT_EQ(store_->Stats().corrupt_chunks, 0);

  // The rebuilt index is the index from now on: a clean restart finds it whole.
  Start();
  EXPECT_FALSE(store_->Stats().index_damaged);
  EXPECT_EQ(store_->Stats().index_lost_writes, 0);
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 0);
  for (const Saved& s : LiveSessions()) ExpectSession(s.key, s.tokens, s.salt, s.base);
}

INSTANTIATE_TEST_SUITE_P(Damage, IndexDamageRebuildTest,
                         ::testing::Values(IndexDamage::kDeletedDirectory, IndexDamage::kGarbledCurrent,
                                           IndexDamage::kFlippedManifestByte, IndexDamage::kDamagedLog,
                                           IndexDamage::kLogCutShort, IndexDamage::kEmptied),
                         [](const auto& info) { return std::string(testing::IndexDamageName(info.param)); });

// A damaged index is set aside once, where its note says; one that was merely behind or
// empty is kept too; a missing one has nothing to keep.
TEST_F(IndexRebuildTest, TheIndexAsFoundIsKeptAside) {
  for (IndexDamage damage : {IndexDamage::kGarbledCurrent, IndexDamage::kLogCutShort, IndexDamage::kDeletedDirectory}) {
    SCOPED_TRACE(testing::IndexDamageName(damage));
    store_.reset();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/ssd");
    Start();
    Persist({"t", "s"}, Iota(6));
    store_.reset();
    testing::DamageIndex(IndexDir(), damage);
    Start();
    EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 1);
    int aside = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      aside += e.path().filename().string().starts_with("index.damaged-");
    }
    EXPECT_EQ(aside, damage == IndexDamage::kDeletedDirectory ? 0 : 1);
  }
}

// A newer version whose write-back was cut short (some chunks on disk, not all) is never
// used: the session comes back as its last complete version.
TEST_F(IndexRebuildTest, AHalfWrittenNewerVersionLeavesTheLastCompleteOne) {
  Start();
  const SessionKey key{"t", "s"};
  Persist(key, Iota(10), 0, /*salt=*/1);
  store_.reset();
  DataFile data = Data();
  const auto versions = data.VersionsOf(key);
  ASSERT_EQ(versions.size(), 1u);
  const uint64_t committed = versions.begin()->first;
  data.WriteVersion(key, Iota(14, 500), /*salt=*/7, committed + 1, /*which=*/{0, 2});  // 2 of 4 chunks
  testing::DamageIndex(IndexDir(), IndexDamage::kDeletedDirectory);
  Start();
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 1);
  ExpectSession(key, Iota(10), 1);
  EXPECT_EQ(store_->Match(key, Iota(14, 500), 14).tokens, 0) << "a chunk of the half-written version is served";
  EXPECT_EQ(SsdBlocksUsed(), 3) << "the half-written version's blocks are not free";
  store_.reset();
  EXPECT_EQ(Data().VersionsOf(key).size(), 1u) << "the half-written version's chunk headers were not erased";
}

// The one unacknowledged version a rebuild takes (index_rebuild.h): complete and verified,
// written before the process stopped between the data sync and the index write. It comes
// back whole, never mixed with the version before it.
TEST_F(IndexRebuildTest, ACompleteVersionWrittenBeforeItsRecordComesBackWholeNeverMixed) {
  Start();
  const SessionKey key{"t", "s"};
  Persist(key, Iota(10), 0, /*salt=*/1);
  store_.reset();
  DataFile data = Data();
  const uint64_t committed = data.VersionsOf(key).begin()->first;
  data.WriteVersion(key, Iota(14, 500), /*salt=*/7, committed + 1, /*which=*/{3, 1, 0, 2});
  testing::DamageIndex(IndexDir(), IndexDamage::kGarbledCurrent);
  Start();
  ExpectSession(key, Iota(14, 500), 7);
  EXPECT_EQ(store_->Match(key, Iota(10), 10).tokens, 0);
  EXPECT_EQ(SsdBlocksUsed(), 4);
}

// A chunk that fails its checksum is never served: the session comes back at its older
// complete version when one is still on disk (a power cut took back the erasure of the
// replaced version), or not at all.
TEST_F(IndexRebuildTest, ACorruptChunkFallsBackToAnOlderCompleteVersionOrLeavesTheSessionOut) {
  Start();
  const SessionKey a{"t", "a"}, b{"t", "b"}, c{"t", "c"};
  Persist(a, Iota(8), 0, /*salt=*/2);
  store_.reset();
  std::map<int64_t, std::vector<std::byte>> a_first;  // a's first version, block by block
  const auto first_versions = Data().VersionsOf(a);
  ASSERT_EQ(first_versions.size(), 1u);
  for (int64_t block : first_versions.begin()->second) a_first[block] = Data().Read(block);
  Start();
  Persist(a, Iota(12), /*keep=*/8, /*salt=*/2);  // a's first version is retired: its headers erased
  Persist(b, Iota(6, 300), 0, /*salt=*/3);
  Persist(c, Iota(5, 500), 0, /*salt=*/4);
  store_.reset();
  DataFile data = Data();
  ASSERT_EQ(data.VersionsOf(a).size(), 1u) << "the replaced version's chunk headers were not erased";
  // As if the erasure was lost (where the blocks are now free: b took a's old ones).
  for (const auto& [block, bytes] : a_first) data.Write(data.FreeBlock({}), bytes);
  ASSERT_EQ(data.VersionsOf(a).size(), 2u);
  data.FlipPayloadByte(data.VersionsOf(a).rbegin()->second.back());  // the newest version's last chunk
  data.FlipPayloadByte(data.VersionsOf(b).begin()->second.front());
  testing::DamageIndex(IndexDir(), IndexDamage::kDeletedDirectory);
  Start();
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 2);
  EXPECT_EQ(store_->Stats().index_rebuild_skipped_sessions, 1);
  ExpectSession(a, Iota(8), 2);
  ExpectSession(c, Iota(5, 500), 4);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(b).status())) << "a session whose only version is corrupt is served";
  EXPECT_EQ(store_->Stats().corrupt_chunks, 0) << "a corrupt chunk reached a promotion";
  EXPECT_EQ(SsdBlocksUsed(), 2 + 2);
}

// What left the store (DropSession, a version replaced and then its session dropped, the
// TTL) is erased from the data file before its blocks are reused: no rebuild brings it back.
TEST_F(IndexRebuildTest, SessionsThatLeftTheStoreDoNotComeBack) {
  Start();
  const SessionKey dropped{"t", "dropped"}, replaced{"t", "replaced-then-dropped"}, kept{"t", "kept"};
  Persist(dropped, Iota(9));
  Persist(replaced, Iota(5));
  Persist(replaced, Iota(11), 4);
  Persist(kept, Iota(7, 300), 0, 6);
  ASSERT_TRUE(store_->Drop(dropped).ok());
  ASSERT_TRUE(store_->Drop(replaced).ok());
  ASSERT_TRUE(store_->AwaitWriteBacks(absl::Seconds(10)).ok());
  store_.reset();
  EXPECT_EQ(Data().ChunkHeaders(), 2) << "only the kept session's chunks may remain";
  testing::DamageIndex(IndexDir(), IndexDamage::kDeletedDirectory);
  Start();
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 1);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(dropped).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get(replaced).status()));
  ExpectSession(kept, Iota(7, 300), 6);
  // Sessions past their TTL are not rebuilt (nor served after).
  store_.reset();
  testing::DamageIndex(IndexDir(), IndexDamage::kDeletedDirectory);
  MakeTiered(kHostChunks, kSsdChunks, kFingerprint, /*ttl=*/absl::Milliseconds(1));
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 0);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(kept).status()));
}

// After a rebuild the rebuilt sessions' blocks are allocated and every other block is
// free: new writes fill exactly the rest, and overwrite nothing rebuilt.
TEST_F(IndexRebuildTest, NewWritesAfterARebuildFillOnlyFreeBlocks) {
  constexpr int64_t kSsd = 16;
  MakeTiered(4, kSsd);
  for (int i = 0; i < 5; ++i) Persist({"old", "s" + std::to_string(i)}, Iota(8, 100 * i), 0, i);  // 10 blocks
  store_.reset();
  testing::DamageIndex(IndexDir(), IndexDamage::kDeletedDirectory);
  MakeTiered(4, kSsd);
  ASSERT_EQ(store_->Stats().index_rebuilt_sessions, 5);
  EXPECT_EQ(SsdBlocksUsed(), 10);
  // Three new sessions of two chunks: the SSD is full, and nothing old had to go for them.
  for (int i = 0; i < 3; ++i) Persist({"new", "s" + std::to_string(i)}, Iota(8, 7000 + i), 0, 10 + i);
  EXPECT_EQ(SsdBlocksUsed(), kSsd);
  EXPECT_EQ(store_->Stats().evictions_ssd_full, 0);
  for (int i = 0; i < 5; ++i) ExpectSession({"old", "s" + std::to_string(i)}, Iota(8, 100 * i), i);
  for (int i = 0; i < 3; ++i) ExpectSession({"new", "s" + std::to_string(i)}, Iota(8, 7000 + i), 10 + i);
  MakeTiered(4, kSsd);  // and across a clean restart
  EXPECT_EQ(SsdBlocksUsed(), kSsd);
  for (int i = 0; i < 5; ++i) ExpectSession({"old", "s" + std::to_string(i)}, Iota(8, 100 * i), i);
  for (int i = 0; i < 3; ++i) ExpectSession({"new", "s" + std::to_string(i)}, Iota(8, 7000 + i), 10 + i);
}

// Chunks a rebuild cannot use — another model's, the old format's (no descriptor) — are
// not rebuilt and not served; their headers are erased, so the next start is quiet.
TEST_F(IndexRebuildTest, ChunksOfAnotherModelOrTheOldFormatAreNotRebuilt) {
  // No read-speed probe: it would write over the free blocks this test looks at.
  tweak_ = [](SessionStoreOptions& o) { o.ssd_probe_bytes = 0; };
  Start();
  const SessionKey old_format{"t", "old-format"};
  Persist({"t", "first"}, Iota(6));                       // blocks 0 and 1, which the other model reuses
  Persist(old_format, Iota(6));                           // blocks 2 and 3
  MakeTiered(kHostChunks, kSsdChunks, kFingerprint + 1);  // this model's records are dropped
  Persist({"t", "other-model"}, Iota(5));
  store_.reset();
  DataFile data = Data();
  const auto versions = data.VersionsOf(old_format);
  ASSERT_EQ(versions.size(), 1u);
  for (int64_t block : versions.begin()->second) data.MakeFormatOne(block);
  testing::DamageIndex(IndexDir(), IndexDamage::kDeletedDirectory);
  Start();
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 0);
  EXPECT_TRUE(absl::IsNotFound(store_->Get(old_format).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "other-model"}).status()));
  EXPECT_EQ(SsdBlocksUsed(), 0);
  store_.reset();
  EXPECT_EQ(Data().ChunkHeaders(), 0) << "unusable chunk headers were left for the next start";
}

// Chunks of format 1 cannot speak for themselves: what the damaged index still says of them
// (here, all of it: RocksDB repairs a flipped MANIFEST byte) is kept, the rest rebuilt.
TEST_F(IndexRebuildTest, RecordsOfFormatOneChunksTheDamagedIndexStillHoldsAreKept) {
  Start();
  const SessionKey old_format{"t", "old-format"}, current{"t", "current"};
  Persist(old_format, Iota(6), 0, 3);
  Persist(current, Iota(5, 300), 0, 4);
  store_.reset();
  DataFile data = Data();
  const auto versions = data.VersionsOf(old_format);
  ASSERT_EQ(versions.size(), 1u);
  for (int64_t block : versions.begin()->second) data.MakeFormatOne(block);
  testing::DamageIndex(IndexDir(), IndexDamage::kFlippedManifestByte);
  Start();
  EXPECT_TRUE(store_->Stats().index_damaged);
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 1);
  ExpectSession(current, Iota(5, 300), 4);
  ExpectSession(old_format, Iota(6), 3);
  EXPECT_EQ(SsdBlocksUsed(), 4);
}

// An empty store starts without a rebuild: its data file holds no chunk header.
TEST_F(IndexRebuildTest, AnEmptyStoreIsNotRebuilt) {
  Start();
  Persist({"t", "s"}, Iota(6));
  ASSERT_TRUE(store_->Drop({"t", "s"}).ok());
  Start();
  EXPECT_EQ(store_->Stats().index_rebuilt_sessions, 0);
  EXPECT_FALSE(store_->Stats().index_damaged);
  store_.reset();
  EXPECT_EQ(Data().ChunkHeaders(), 0);
}

}  // namespace
}  // namespace strata::storage
