#include "storage/pending_drops.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"

namespace strata::storage {
namespace {

TEST(PendingDropsTest, RecordsEachDropsLatestTimeAndSkipsALineCutShort) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/index.pending-drops";
  PendingDrops drops(path);
  EXPECT_TRUE(drops.Load().empty()) << "no file: no drops";
  ASSERT_TRUE(drops.Add({"t", "a"}, 100).ok());
  ASSERT_TRUE(drops.Add({"t", "a b\\n"}, 200).ok());  // ids with spaces and escapes
  ASSERT_TRUE(drops.Add({"t", "a"}, 300).ok());
  ASSERT_TRUE(drops.Add({"u", "a"}, 50).ok());
  std::ofstream(path, std::ios::app) << "400 1 1 t";  // an append cut short by a crash
  auto loaded = PendingDrops(path).Load();
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[SessionMapKey({"t", "a"})], 300u);
  EXPECT_EQ(loaded[SessionMapKey({"t", "a b\\n"})], 200u);
  EXPECT_EQ(loaded[SessionMapKey({"u", "a"})], 50u);
  drops.Clear();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(drops.Load().empty());
}

}  // namespace
}  // namespace strata::storage
