// Test fixtures of the session store: a host-only store (SessionStoreTest) and one with
// an SSD tier and an index (TieredStoreTest), with fake KV whose bytes say where they
// belong, for the store's test files.
#ifndef STRATA_STORAGE_TESTING_STORE_FIXTURE_H_
#define STRATA_STORAGE_TESTING_STORE_FIXTURE_H_

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "storage/session_store.h"
#include "storage/testing/temp_dir.h"

namespace strata::storage {


inline constexpr uint64_t kFingerprint = 0xfeed;

// Fake KV: the row of token t, layer l, K/V kv is filled with the byte (t*3 + l*5 + kv + salt) & 0xff.
inline std::byte RowByte(int64_t token, int layer, int kv, int salt = 0) {
  return static_cast<std::byte>((token * 3 + layer * 5 + kv + salt) & 0xff);
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

  absl::Status SaveAll(const SessionKey& key, const std::vector<int32_t>& tokens, int64_t keep, int salt = 0,
                       std::string_view base = {}) {
    const ChunkLayout& layout = store_->layout();
    return store_->Save(
        key, tokens, keep,
        [&](int64_t begin, int count, absl::Span<std::byte> p) {
          for (int i = 0; i < count; ++i)
            for (int l = 0; l < layout.layers; ++l)
              for (int kv = 0; kv < 2; ++kv)
                std::memset(p.data() + layout.RowOffset(l, kv, i),
                            static_cast<int>(RowByte(begin + i, l, kv, salt)), static_cast<size_t>(layout.row_bytes));
        },
        base);
  }

  // Whether every row of a leased chunk holds the bytes SaveAll wrote with `salt`.
  bool HoldsSavedBytes(const LeasedChunk& c, int salt = 0) const {
    const ChunkLayout& layout = store_->layout();
    for (int i = 0; i < c.count; ++i)
      for (int l = 0; l < layout.layers; ++l)
        for (int kv = 0; kv < 2; ++kv)
          for (int64_t b = 0; b < layout.row_bytes; ++b) {
            const std::byte want = RowByte(c.token_begin + i, l, kv, salt);
            if (c.payload[static_cast<size_t>(layout.RowOffset(l, kv, i) + b)] != want) return false;
          }
    return true;
  }

  int64_t HostBlocksUsed() const { return store_->Stats().host_used_bytes / store_->layout().BlockBytes(); }

  // Reads `n` tokens and checks every row holds the bytes SaveAll wrote.
  int64_t ReadAndCheck(const SessionKey& key, int64_t n, int salt = 0) {
    const ChunkLayout& layout = store_->layout();
    int64_t next = 0;
    auto got = store_->Read(key, n, [&](int64_t begin, int count, absl::Span<const std::byte> p) {
      EXPECT_EQ(begin, next);
      for (int i = 0; i < count; ++i)
        for (int l = 0; l < layout.layers; ++l)
          for (int kv = 0; kv < 2; ++kv)
            EXPECT_EQ(p[layout.RowOffset(l, kv, i)], RowByte(begin + i, l, kv, salt))
                << "token " << begin + i << " layer " << l << " kv " << kv;
      next = begin + count;
    });
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : -1;
  }

  std::unique_ptr<SessionStore> store_;
};

inline std::vector<int32_t> Iota(int n, int start = 100) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// With an SSD tier and an index.
class TieredStoreTest : public SessionStoreTest {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_ + "/ssd"); }
  void TearDown() override { store_.reset(); }
  void MakeTiered(int64_t host_chunks, int64_t ssd_chunks, uint64_t fingerprint = kFingerprint,
                  absl::Duration ttl = absl::Hours(1), PlacementPolicy policy = PlacementPolicy::kSchedulerAware) {
    store_.reset();
    SessionStoreOptions o;
    o.placement = policy;
    o.layout = ChunkLayout{.layers = 2, .chunk_tokens = 4, .row_bytes = 8};
    o.host_capacity_bytes = host_chunks * o.layout.BlockBytes();
    o.model_fingerprint = fingerprint;
    o.ssd_dirs = {dir_ + "/ssd"};
    o.ssd_capacity_bytes_per_dir = ssd_chunks * o.layout.BlockBytes();
    o.index_dir = dir_ + "/index";
    o.ttl = ttl;
    if (tweak_) tweak_(o);
    auto s = SessionStore::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  std::function<void(SessionStoreOptions&)> tweak_;  // changes MakeTiered's options
  testing::TempDir tmp_{"strata-store"};
  std::string dir_ = tmp_.path();
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_TESTING_STORE_FIXTURE_H_
