// Damage done to a stopped store's session index, in each way the index tests damage it,
// for the tests of what a store makes of it (index_rebuild_test.cc, the crash test).
#ifndef STRATA_STORAGE_TESTING_INDEX_DAMAGE_H_
#define STRATA_STORAGE_TESTING_INDEX_DAMAGE_H_

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "storage/session_index.h"

namespace strata::storage::testing {

enum class IndexDamage {
  kDeletedDirectory,     // the whole index directory is gone (with its acknowledged-writes record)
  kGarbledCurrent,       // CURRENT names no manifest
  kFlippedManifestByte,  // one byte of the MANIFEST flipped
  kDamagedLog,           // bytes in the middle of the newest write-ahead log flipped
  kLogCutShort,          // the newest log cut to half its length (RocksDB takes it for a torn tail)
  kEmptied,              // replaced by a new, empty database
};

inline const char* IndexDamageName(IndexDamage d) {
  switch (d) {
    case IndexDamage::kDeletedDirectory:
      return "DeletedDirectory";
    case IndexDamage::kGarbledCurrent:
      return "GarbledCurrent";
    case IndexDamage::kFlippedManifestByte:
      return "FlippedManifestByte";
    case IndexDamage::kDamagedLog:
      return "DamagedLog";
    case IndexDamage::kLogCutShort:
      return "LogCutShort";
    case IndexDamage::kEmptied:
      return "Emptied";
  }
  return "?";
}

// The newest file of the index whose name starts with `prefix` and ends with `suffix`.
inline std::filesystem::path NewestIndexFile(const std::string& dir, const std::string& prefix,
                                             const std::string& suffix) {
  std::filesystem::path newest;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(prefix) && name.ends_with(suffix) &&
        (newest.empty() || e.path().filename() > newest.filename())) {
      newest = e.path();
    }
  }
  return newest;
}

// Flips `n` bytes from `where` (a fraction of the file's length) on.
inline void FlipFileBytes(const std::filesystem::path& p, double where, int n) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const auto size = static_cast<int64_t>(f.tellg());
  for (int i = 0; i < n; ++i) {
    const int64_t at = static_cast<int64_t>(static_cast<double>(size) * where) + i;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(at);
    f.write(&c, 1);
  }
}

// Damages the index in `dir` (no store may have it open).
inline void DamageIndex(const std::string& dir, IndexDamage damage) {
  switch (damage) {
    case IndexDamage::kDeletedDirectory:
      std::filesystem::remove_all(dir);
      return;
    case IndexDamage::kGarbledCurrent:
      std::ofstream(dir + "/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
      return;
    case IndexDamage::kFlippedManifestByte: {
      const std::filesystem::path manifest = NewestIndexFile(dir, "MANIFEST-", "");
      ASSERT_FALSE(manifest.empty()) << "no MANIFEST in " << dir;
      FlipFileBytes(manifest, 0.3, 1);
      return;
    }
    case IndexDamage::kDamagedLog:
    case IndexDamage::kLogCutShort: {
      const std::filesystem::path log = NewestIndexFile(dir, "", ".log");
      ASSERT_FALSE(log.empty()) << "no log in " << dir;
      ASSERT_GT(std::filesystem::file_size(log), 0u) << log << " holds no record to damage";
      if (damage == IndexDamage::kDamagedLog) {
        FlipFileBytes(log, 0.5, 4);
      } else {
        std::filesystem::resize_file(log, std::filesystem::file_size(log) / 2);
      }
      return;
    }
    case IndexDamage::kEmptied: {
      std::filesystem::remove_all(dir);
      auto fresh = SessionIndex::Open(dir);
      ASSERT_TRUE(fresh.ok()) << fresh.status();
      return;
    }
  }
}

}  // namespace strata::storage::testing

#endif  // STRATA_STORAGE_TESTING_INDEX_DAMAGE_H_
