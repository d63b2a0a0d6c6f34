// A bounded soak of the session store with faults injected, for the sanitizer trees (TSan
// and ASan run it as part of storage_test): threads save, flush, fill asynchronously (some
// copies fail), save versions too large for the host tier, drop, read and promote their
// own sessions (one session is never used by two threads at once, as the engine
// guarantees) over a small host tier that keeps demoting. Whatever is served must be
// bytes some version wrote, and at the end every session acknowledged as persisted
// (and not dropped since) is still there, at that version or a later persisted one.
#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/testing/store_fixture.h"

namespace strata::storage {
namespace {

constexpr int kThreads = 4;
constexpr int kSessionsPerThread = 3;

// Version `v` of a session: tokens[0] names the version, so versions share no prefix.
std::vector<int32_t> VersionTokens(int v, int length) {
  std::vector<int32_t> t = Iota(length, 1000);
  t[0] = v;
  return t;
}

class StoreSoakTest : public TieredStoreTest {
 protected:
  // The version of `key` the store serves (among `versions`, newest first) with all its
  // bytes checked, or -1 when it holds none.
  int Served(const SessionKey& key, const std::map<int, int>& versions, const std::string& history = "") {
    for (int attempt = 0; attempt < 100; ++attempt) {
      if (!store_->Get(key).ok()) return -1;
      int found = -1;
      for (auto it = versions.rbegin(); it != versions.rend() && found < 0; ++it) {
        const std::vector<int32_t> tokens = VersionTokens(it->first, it->second);
        const int64_t n = static_cast<int64_t>(tokens.size());
        PrefixMatch m = store_->Match(key, tokens, n);
        if (m.tokens == 0) continue;
        EXPECT_EQ(m.tokens, n) << key.session_id << " v" << it->first << " torn";
        std::string wrong;
        auto read = store_->Read(key, m.tokens, [&](int64_t begin, int count, absl::Span<const std::byte> p) {
          if (wrong.empty() && !HoldsSavedBytes(LeasedChunk{begin, count, p}, it->first)) {
            wrong = absl::StrCat("tokens ", begin, "+", count, " hold the bytes of salt ",
                                 (static_cast<int>(p[0]) - begin * 3) & 0xff);
          }
        });
        // Another thread may have pushed this version out between Match and Read (the
        // session then serves an older one): only a version still in place is judged.
        if (store_->Match(key, tokens, n).tokens != n) {
          found = -2;
          break;
        }
        EXPECT_TRUE(read.ok()) << read.status();
        EXPECT_EQ(wrong, "") << key.session_id << " v" << it->first << " (salt " << (it->first & 0xff)
                             << ") served wrong bytes: " << wrong << "; history:"
                             << history.substr(history.size() > 700 ? history.size() - 700 : 0);
        found = it->first;
      }
      if (found != -2) return found;
    }
    return -1;
  }
};

TEST_F(StoreSoakTest, ConcurrentOperationsWithFaultsKeepAcknowledgedSessions) {
  // The SSD holds every version in flight: its own capacity policy (which may delete a
  // persisted session) never runs, so any loss is the store's fault.
  MakeTiered(/*host_chunks=*/24, /*ssd_chunks=*/512);
  std::atomic<int> next_version{1};
  std::vector<std::map<std::string, std::map<int, int>>> saved(kThreads);  // per thread: session -> version -> length
  std::vector<std::map<std::string, int>> acked(kThreads);                 // per thread: session -> version
  std::vector<std::map<std::string, std::string>> history(kThreads);     // per thread: session -> what was done
  const absl::Time end = absl::Now() + absl::Milliseconds(1500);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(77 + t);
      while (absl::Now() < end) {
        const std::string id = "t" + std::to_string(t) + "-s" + std::to_string(rng() % kSessionsPerThread);
        const SessionKey key{"soak", id};
        const int op = static_cast<int>(rng() % 100);
        const int v = next_version++;
        if (op < 40) {  // save, and half the time flush
          const int length = 4 + static_cast<int>(rng() % 20);
          if (!SaveAll(key, VersionTokens(v, length), 0, v).ok()) continue;
          saved[t][id][v] = length;
          history[t][id] += " save:v" + std::to_string(v);
          if (rng() % 2 == 0) {
            absl::Status f = store_->Flush(key, absl::Seconds(10));
            if (f.ok()) acked[t][id] = v;
            history[t][id] += f.ok() ? "+flushed" : "+flush:" + std::string(absl::StatusCodeToString(f.code()));
          }
        } else if (op < 60) {  // asynchronous save; a fifth of the copies fail
          const int length = 4 + static_cast<int>(rng() % 20);
          const std::vector<int32_t> tokens = VersionTokens(v, length);
          std::vector<std::pair<int64_t, absl::Span<std::byte>>> payloads;
          auto ticket = store_->SaveAsync(key, tokens, 0, [&](int64_t begin, int, absl::Span<std::byte> p) {
            payloads.push_back({begin, p});
          });
          if (!ticket.ok()) continue;
          const bool fail = rng() % 5 == 0;
          if (!fail) {
            const ChunkLayout& layout = store_->layout();
            for (auto& [begin, p] : payloads) {
              const int count = static_cast<int>(std::min<int64_t>(layout.chunk_tokens, length - begin));
              for (int i = 0; i < count; ++i)
                for (int l = 0; l < layout.layers; ++l)
                  for (int kv = 0; kv < 2; ++kv)
                    std::memset(p.data() + layout.RowOffset(l, kv, i), static_cast<int>(RowByte(begin + i, l, kv, v)),
                                static_cast<size_t>(layout.row_bytes));
            }
            saved[t][id][v] = length;
          }
          store_->FinishFill(*ticket, fail ? absl::InternalError("injected copy failure") : absl::OkStatus());
          history[t][id] += (fail ? " async-failed:v" : " async:v") + std::to_string(v);
        } else if (op < 65) {  // a version too large for the host tier
          EXPECT_TRUE(absl::IsResourceExhausted(SaveAll(key, VersionTokens(v, 200), 0, v)));
          history[t][id] += " too-large:v" + std::to_string(v);
        } else if (op < 70) {  // dropped on purpose
          if (store_->Drop(key).ok()) {
            acked[t].erase(id);
            saved[t][id].clear();
            history[t][id] += " drop";
          }
        } else {  // read what is served (promoting from SSD when it must)
          history[t][id] += " read:v" + std::to_string(Served(key, saved[t][id], history[t][id]));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  int checked = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (const auto& [id, v] : acked[t]) {
      const int served = Served({"soak", id}, saved[t][id], history[t][id]);
      EXPECT_GE(served, v) << id << " was acknowledged at v" << v << " and came back as v" << served
                           << "; its history:" << history[t][id].substr(history[t][id].size() > 600 ? history[t][id].size() - 600 : 0);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "nothing was acknowledged: the soak tested nothing";
  EXPECT_GT(store_->Stats().reverted_to_persisted, 0) << "no fault reached a persisted session";
}

}  // namespace
}  // namespace strata::storage
