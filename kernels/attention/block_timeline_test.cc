// The wgmma system part's phase stamps (block_timeline.h). In every build the calls say
// whether it stamps; in a timeline build on Hopper every block of a launch stamps its phases
// after the arming stamp and in the order they happen, and the launch's output is unchanged
// by them (the prefill tests check it against the CPU twin in that build too).
#include "kernels/attention/block_timeline.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/paged_pool.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;
namespace in = internal;

TEST(WgmmaTimelineTest, ABuildWithoutStampsArmsAndReadsNothing) {
  if (in::WgmmaTimelineStamps()) GTEST_SKIP() << "a timeline build (-DSTRATA_KERNEL_TIMELINE=ON)";
  in::BlockTimeline timeline;
  EXPECT_EQ(in::ArmWgmmaTimeline(nullptr), cudaErrorNotSupported);
  EXPECT_EQ(in::ReadWgmmaTimeline(&timeline), cudaErrorNotSupported);
  EXPECT_TRUE(timeline.blocks.empty());
}

class CudaWgmmaTimelineTest : public test_support::GpuTest {};

TEST_F(CudaWgmmaTimelineTest, EveryBlockStampsItsPhasesInOrder) {
  if (!in::WgmmaTimelineStamps()) GTEST_SKIP() << "built without -DSTRATA_KERNEL_TIMELINE=ON";
  if (!in::PrefillWgmmaSupported(128)) GTEST_SKIP() << "no sm_90 device: the wgmma form does not run here";
  // Two sequences of 300 and 1000 keys, 130 and 3 new rows, Llama's GQA (4 heads a KV head):
  // 5 and 1 row tiles of 128 packed rows over 2 KV heads. The blocks past a sequence's rows
  // return after their first stamp.
  const std::vector<int64_t> lengths{300, 1000};
  const std::vector<int32_t> qo_indptr{0, 130, 133};
  const int kv_heads = 2, heads = 8, d = 128, page = 16;
  const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, page, kv_heads, d, 7);
  DeviceVector<uint16_t> k(pool.k), v(pool.v);
  DeviceVector<int32_t> indptr(pool.indptr), indices(pool.indices), last(pool.last_page_len), dqo(qo_indptr);
  DeviceVector<float> q{std::vector<float>(size_t{133} * heads * d, 0.5f)};
  DeviceVector<float> out{std::vector<float>(size_t{133} * heads * d)}, lse{std::vector<float>(size_t{133} * heads)};
  const in::PrefillTcParams p{.q = q.get(),
                              .k_pages = k.get(),
                              .v_pages = v.get(),
                              .indptr = indptr.get(),
                              .indices = indices.get(),
                              .last_page_len = last.get(),
                              .qo_indptr = dqo.get(),
                              .page_size = page,
                              .kv_heads = kv_heads,
                              .head_dim = d,
                              .num_heads = heads,
                              .batch = 2,
                              .max_new_tokens = 130,
                              .scale = 1.0f / std::sqrt(static_cast<float>(d)),
                              .out = out.get(),
                              .lse = lse.get()};
  ASSERT_EQ(in::ArmWgmmaTimeline(stream_), cudaSuccess);
  ASSERT_EQ(in::PagedPrefillAttentionWgmmaWsAsync(p, stream_), cudaSuccess);
  in::BlockTimeline timeline;
  ASSERT_EQ(in::ReadWgmmaTimeline(&timeline), cudaSuccess);
  // The grid: 5 row tiles (the longest sequence's) x 2 KV heads x 2 sequences, each entering.
  ASSERT_EQ(timeline.blocks.size(), 20u);
  int working = 0;
  for (const auto& b : timeline.blocks) {
    EXPECT_GE(b[in::kEntered], timeline.armed_ns);
    if (b[in::kLocated] == 0) continue;  // no rows of its sequence: it returned
    ++working;
    EXPECT_LE(b[in::kEntered], b[in::kLocated]);
    EXPECT_LE(b[in::kLocated], b[in::kFirstLanded]);
    EXPECT_LE(b[in::kFirstLanded], b[in::kProducerDone]);
    EXPECT_LE(b[in::kLocated], b[in::kQReady]);
    EXPECT_LE(b[in::kQReady], b[in::kFirstTaken]);
    EXPECT_LE(b[in::kFirstLanded], b[in::kFirstTaken]);  // the consumer waited for the tile
    EXPECT_LE(b[in::kFirstTaken], b[in::kLoopDone]);
    EXPECT_LE(b[in::kLoopDone], b[in::kStored]);
  }
  // Sequence 0's 130 rows x 4 heads fill 5 tiles, sequence 1's 3 x 4 one: 6 a KV head.
  EXPECT_EQ(working, 12);
}

}  // namespace
}  // namespace strata::kernels
