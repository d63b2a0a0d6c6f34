// The CUDA backend's bf16 kernels against their CPU twins (kernels/testing/*_cpu.h). Tolerances:
// fp32 outputs 1e-5 relative (as decode_test); bf16 outputs exact where the twin
// only copies or rounds the same fp32 value, else within one bf16 unit (the fp32 value
// before rounding may differ in its last bits: reduction order, device cos/sin/exp).
#include "kernels/sampling/sampling.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/attention_cpu.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/elementwise/elementwise_cpu.h"
#include "kernels/gemm/gemm_cpu.h"
#include "kernels/norm/norm_cpu.h"
#include "kernels/rope/rope_cpu.h"
#include "kernels/sampling/sampling_cpu.h"
#include "kernels/testing/attention_cpu.h"
#include "kernels/testing/elementwise_cpu.h"
#include "kernels/testing/gemm_cpu.h"
#include "kernels/testing/norm_cpu.h"
#include "kernels/testing/rope_cpu.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"
#include "kernels/testing/cuda_testing.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;
using test_support::RandomFloats;

std::vector<uint16_t> ToBf16Vector(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

// Within `ulps` bf16 units (same sign: adjacent bf16 values of one sign are adjacent integers).
void ExpectBf16Near(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, int ulps,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int diff = std::abs(static_cast<int>(got[i]) - static_cast<int>(want[i]));
    const bool both_zero = (got[i] & 0x7fff) == 0 && (want[i] & 0x7fff) == 0;
    if (diff > ulps && !both_zero && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << Bf16ToFloat(got[i]) << " on the GPU, "
                    << Bf16ToFloat(want[i]) << " on the CPU";
    }
  }
}

void ExpectFloatNear(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-5 * std::max(1.0, std::abs(static_cast<double>(want[i])));
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= tol) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " on the GPU, " << want[i] << " on the CPU";
    }
  }
}

class CudaModelKernelsTest : public test_support::GpuTest {};

TEST_F(CudaModelKernelsTest, EmbedBf16CopiesRows) {
  const int vocab = 50, dim = 96, rows = 7;
  const std::vector<uint16_t> table = ToBf16Vector(RandomFloats(vocab * dim, 1, -2, 2));
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17, 8, 25};
  std::vector<float> want(rows * dim);
  EmbedBf16(table.data(), ids.data(), rows, dim, want.data());
  DeviceVector<uint16_t> dt(table);
  DeviceVector<int32_t> di(ids);
  DeviceVector<float> dout{std::vector<float>(want.size(), NAN)};
  ASSERT_TRUE(LaunchEmbedBf16({dt.get(), di.get(), rows, dim, dout.get()}, stream_).ok());
  Sync();
  EXPECT_EQ(dout.ToHost(), want);
}

TEST_F(CudaModelKernelsTest, RmsNormToBf16MatchesCpu) {
  for (bool add : {false, true}) {
    // Rows of 4, 8 and 16 elements a thread held in registers, and past that the looping form.
    for (int dim : {64, 1000, 4096, 8192, 9000}) {
      const int rows = 5;
      const std::string what = std::string(add ? "add+norm" : "norm") + " dim " + std::to_string(dim);
      std::vector<float> x = RandomFloats(rows * dim, dim, -3, 3);
      const std::vector<float> a = RandomFloats(rows * dim, dim + 1, -1, 1);
      const std::vector<float> w = RandomFloats(dim, 7, 0.5f, 1.5f);
      DeviceVector<float> dx(x), da(a), dw(w);
      DeviceVector<uint16_t> dy{std::vector<uint16_t>(x.size(), 0xffff)};
      std::vector<uint16_t> want(x.size());
      RmsNormToBf16(add ? a.data() : nullptr, x.data(), w.data(), want.data(), rows, dim, 1e-5f);
      ASSERT_TRUE(LaunchRmsNormToBf16({add ? da.get() : nullptr, dx.get(), dw.get(), dy.get(), rows, dim, 1e-5f},
                                      stream_).ok());
      Sync();
      ExpectBf16Near(dy.ToHost(), want, 1, what);
      EXPECT_EQ(dx.ToHost(), x) << what << ": the residual stream after the add";
    }
  }
}

// Qwen3's q/k norms in place on QKV rows: each q head with q's weights and each k head with
// k's, V and the rows' padding untouched, within fp32 rounding of RmsNorm per head.
TEST_F(CudaModelKernelsTest, HeadRmsNormMatchesCpuPerHead) {
  for (int head_dim : {64, 128}) {
    const int rows = 7, q_heads = 8, k_heads = 2, v_width = k_heads * head_dim;
    const int64_t stride = int64_t{q_heads + k_heads} * head_dim + v_width;
    const std::vector<float> x = RandomFloats(static_cast<size_t>(rows * stride), head_dim, -3, 3);
    const std::vector<float> qw = RandomFloats(head_dim, 1, 0.5f, 1.5f), kw = RandomFloats(head_dim, 2, 0.5f, 1.5f);
    std::vector<float> want = x;
    for (int r = 0; r < rows; ++r) {
      float* row = want.data() + r * stride;
      RmsNorm(row, qw.data(), row, q_heads, head_dim, 1e-6f);
      RmsNorm(row + q_heads * head_dim, kw.data(), row + q_heads * head_dim, k_heads, head_dim, 1e-6f);
    }
    DeviceVector<float> dx(x), dqw(qw), dkw(kw);
    ASSERT_TRUE(LaunchHeadRmsNorm({dx.get(), rows, stride, q_heads, k_heads, head_dim, dqw.get(), dkw.get(), 1e-6f},
                                  stream_).ok());
    Sync();
    const std::vector<float> got = dx.ToHost();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * (1 + std::abs(want[i]))) << "head_dim " << head_dim << " element " << i;
    }
  }
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchHeadRmsNorm({nullptr, 1, 10, 2, 1, 8, nullptr, nullptr, 1e-6f}, stream_)))
      << "a row stride shorter than the heads";
}

TEST_F(CudaModelKernelsTest, SwiGluAndToBf16MatchCpu) {
  // ffn a multiple of 4 (four columns a thread: one 8-byte store, or two 4-byte ones where
  // out is off the 8-byte grid), not (an element a thread), and more rows than a grid's y.
  struct Case {
    int rows, ffn, out_offset;
  };
  for (const Case& c : {Case{3, 1400, 0}, Case{3, 1400, 2}, Case{3, 1402, 0}, Case{65536, 4, 0}}) {
    const std::vector<float> gu = RandomFloats(static_cast<size_t>(c.rows) * 2 * c.ffn, 5, -6, 6);
    std::vector<uint16_t> want(static_cast<size_t>(c.rows) * c.ffn);
    SwiGluToBf16(gu.data(), want.data(), c.rows, c.ffn);
    DeviceVector<float> dgu(gu);
    DeviceVector<uint16_t> dout{std::vector<uint16_t>(want.size() + c.out_offset, 0xffff)};
    ASSERT_TRUE(LaunchSwiGluToBf16({dgu.get(), dout.get() + c.out_offset, c.rows, c.ffn}, stream_).ok());
    DeviceVector<uint16_t> dcast{std::vector<uint16_t>(gu.size(), 0xffff)};
    ASSERT_TRUE(LaunchToBf16({dgu.get(), dcast.get(), static_cast<int64_t>(gu.size())}, stream_).ok());
    Sync();
    std::vector<uint16_t> got = dout.ToHost();
    const std::string what = "swiglu " + std::to_string(c.rows) + " x " + std::to_string(c.ffn) + ", out + " +
                             std::to_string(c.out_offset);
    for (int i = 0; i < c.out_offset; ++i) EXPECT_EQ(got[i], 0xffff) << what << ": wrote before out";
    got.erase(got.begin(), got.begin() + c.out_offset);
    ExpectBf16Near(got, want, 1, what);
    EXPECT_EQ(dcast.ToHost(), ToBf16Vector(gu)) << "ToBf16 rounds to nearest even like FloatToBf16";
  }
}

// A pool of `pages` slots per plane, poisoned.
struct Planes {
  explicit Planes(int64_t values) : k_rot(values, 0x7fc1), k_raw(values, 0x7fc1), v(values, 0x7fc1) {}
  std::vector<uint16_t> k_rot, k_raw, v;
};

TEST_F(CudaModelKernelsTest, QkvRopePlaceMatchesCpuAndLoadGivesTheSameK) {
  for (bool bias : {false, true}) {
    for (int head_dim : {64, 128}) {
      const int heads = 8, kv_heads = 2, rows = 6, slots_total = 64;
      const int qd = heads * head_dim, kvd = kv_heads * head_dim, width = qd + 2 * kvd;
      const std::string what = std::string(bias ? "bias" : "no bias") + " head_dim " + std::to_string(head_dim);
      const std::vector<float> qkv = RandomFloats(rows * width, head_dim, -2, 2);
      const std::vector<float> b = RandomFloats(width, 3, -0.5f, 0.5f);
      const std::vector<int32_t> positions = {0, 1, 2, 700, 4095, 9};
      const std::vector<int64_t> slots = {5, 6, 7, 40, 63, 0};
      const std::vector<float> inv_freq = RopeInvFreq(head_dim, 500000.0f, RopeScaling{.llama3 = true});
      Planes host(int64_t{slots_total} * kvd);
      std::vector<float> q_want(rows * qd);
      QkvPlaceParams p{qkv.data(), bias ? b.data() : nullptr, positions.data(), slots.data(), rows, heads, kv_heads,
                       head_dim, inv_freq.data(), q_want.data(), host.k_rot.data(), host.k_raw.data(), host.v.data()};
      QkvRopePlace(p);

      DeviceVector<float> dqkv(qkv), db(b), dfreq(inv_freq), dq{std::vector<float>(rows * qd, NAN)};
      DeviceVector<int32_t> dpos(positions);
      DeviceVector<int64_t> dslots(slots);
      Planes init(int64_t{slots_total} * kvd);
      DeviceVector<uint16_t> rot(init.k_rot), raw(init.k_raw), val(init.v);
      QkvPlaceParams dp{dqkv.get(), bias ? db.get() : nullptr, dpos.get(), dslots.get(), rows, heads, kv_heads,
                        head_dim, dfreq.get(), dq.get(), rot.get(), raw.get(), val.get()};
      ASSERT_TRUE(LaunchQkvRopePlace(dp, stream_).ok());
      Sync();
      ExpectFloatNear(dq.ToHost(), q_want, what + " q");
      EXPECT_EQ(raw.ToHost(), host.k_raw) << what << ": K before RoPE";
      EXPECT_EQ(val.ToHost(), host.v) << what << ": V";
      ExpectBf16Near(rot.ToHost(), host.k_rot, 1, what + " rotated K");

      // The session cache's round trip on the device: gather the stored rows, place them
      // into fresh planes at the same positions: every plane comes back bit-identical.
      const int chunk = 8;
      StoredKvParams sp{rows, 1, chunk, kv_heads, head_dim, dpos.get(), dslots.get(), dfreq.get(),
                        int64_t{slots_total} * kvd, nullptr, raw.get(), val.get()};
      DeviceVector<uint16_t> stored{std::vector<uint16_t>(2 * chunk * kvd, 0)};
      ASSERT_TRUE(LaunchGatherStoredKv(sp, stored.get(), stream_).ok());
      DeviceVector<uint16_t> rot2(init.k_rot), raw2(init.k_raw), val2(init.v);
      sp.k_rot = rot2.get();
      sp.k_raw = raw2.get();
      sp.v = val2.get();
      ASSERT_TRUE(LaunchPlaceStoredKv(stored.get(), sp, stream_).ok());
      Sync();
      EXPECT_EQ(rot2.ToHost(), rot.ToHost()) << what << ": K placed from the cache differs from K computed";
      EXPECT_EQ(raw2.ToHost(), raw.ToHost()) << what;
      EXPECT_EQ(val2.ToHost(), val.ToHost()) << what;

      // And the twins agree on the stored layout.
      std::vector<uint16_t> stored_want(2 * chunk * kvd, 0);
      StoredKvParams hp{rows, 1, chunk, kv_heads, head_dim, positions.data(), slots.data(), inv_freq.data(),
                        int64_t{slots_total} * kvd, nullptr, host.k_raw.data(), host.v.data()};
      GatherStoredKv(hp, stored_want.data());
      EXPECT_EQ(stored.ToHost(), stored_want) << what << ": stored chunk rows";
      // With fewer blocks than rows (each taking rows in turn): the same rows.
      DeviceVector<uint16_t> few{std::vector<uint16_t>(2 * chunk * kvd, 0)};
      ASSERT_TRUE(LaunchGatherStoredKv(sp, few.get(), stream_, /*max_blocks=*/2).ok());
      Sync();
      EXPECT_EQ(few.ToHost(), stored_want) << what << ": stored chunk rows, 2 blocks";
    }
  }
}

// A write-back's chunks gathered in one launch: each chunk's payload holds what
// GatherStoredKv writes for it alone (the CPU twin), a partial chunk's other rows keep
// their bytes, a payload off the 16-byte grid takes the element-wise path, and any number
// of blocks gives the same bytes.
TEST_F(CudaModelKernelsTest, GatheredChunksEqualOneGatherPerChunk) {
  const int layers = 3, chunk = 8, kv_heads = 2, head_dim = 64, slots_total = 40;
  const int kvd = kv_heads * head_dim;
  const int64_t layer_stride = int64_t{slots_total} * kvd;
  std::vector<uint16_t> k_raw = ToBf16Vector(RandomFloats(layers * layer_stride, 31, -2, 2));
  std::vector<uint16_t> v = ToBf16Vector(RandomFloats(layers * layer_stride, 32, -2, 2));
  // Chunk c's tokens' slots: full, full, 3 tokens, empty.
  const std::vector<std::vector<int64_t>> slots = {
      {3, 4, 5, 6, 7, 8, 9, 10}, {39, 0, 17, 18, 2, 1, 30, 31}, {12, 11, 25}, {}};
  const int chunks = static_cast<int>(slots.size());
  // Payloads of `payload` values, `stride` apart (room for one off the grid).
  const int64_t payload = int64_t{layers} * 2 * chunk * kvd, stride = payload + 8;
  std::vector<uint16_t> want(chunks * stride, 0x5a5a);
  for (int c = 0; c < chunks; ++c) {
    StoredKvParams hp{static_cast<int>(slots[c].size()), layers, chunk, kv_heads, head_dim, nullptr,
                      slots[c].data(), nullptr, layer_stride, nullptr, k_raw.data(), v.data()};
    // Chunk 1's payload lies one value off the 16-byte grid.
    GatherStoredKv(hp, want.data() + c * stride + (c == 1 ? 1 : 0));
  }
  DeviceVector<uint16_t> dk(k_raw), dv(v);
  for (int blocks : {0, 1, 5}) {
    DeviceVector<uint16_t> out{std::vector<uint16_t>(want.size(), 0x5a5a)};
    const int64_t words = StoredChunkRecordWords(chunk);
    std::vector<int64_t> records(chunks * words, -1);
    for (int c = 0; c < chunks; ++c) {
      records[c * words] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out.get() + c * stride + (c == 1)));
      records[c * words + 1] = static_cast<int64_t>(slots[c].size());
      std::copy(slots[c].begin(), slots[c].end(), records.begin() + c * words + 2);
    }
    DeviceVector<int64_t> drecords(records);
    StoredChunksParams p{chunks, layers, chunk, kv_heads, head_dim, drecords.get(), layer_stride, dk.get(), dv.get()};
    ASSERT_TRUE(LaunchGatherStoredKvChunks(p, stream_, blocks).ok());
    Sync();
    EXPECT_EQ(out.ToHost(), want) << blocks << " blocks (0: one a row)";
  }
  StoredChunksParams none{1, layers, chunk, kv_heads, head_dim, nullptr, layer_stride, dk.get(), dv.get()};
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchGatherStoredKvChunks(none, stream_))) << "records missing";
  none.head_dim = 7;
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchGatherStoredKvChunks(none, stream_))) << "odd head_dim";
}

// Qwen3's q/k norms inside QkvRopePlace equal HeadRmsNorm on the rows followed by the plain
// QkvRopePlace (up to the order of the sum of squares: q within fp32 rounding, K within a
// bf16 unit), and V is untouched by them.
TEST_F(CudaModelKernelsTest, QkvRopePlaceWithHeadNormsEqualsHeadRmsNormThenPlace) {
  for (int head_dim : {64, 128, 256}) {
    const int heads = 8, kv_heads = 2, rows = 5, slots_total = 16;
    const int qd = heads * head_dim, kvd = kv_heads * head_dim, width = qd + 2 * kvd;
    const std::string what = "head_dim " + std::to_string(head_dim);
    const std::vector<float> qkv = RandomFloats(rows * width, head_dim + 7, -3, 3);
    const std::vector<float> qw = RandomFloats(head_dim, 11, 0.5f, 1.5f), kw = RandomFloats(head_dim, 12, 0.5f, 1.5f);
    const std::vector<int32_t> positions = {0, 3, 77, 1000, 5};
    const std::vector<int64_t> slots = {1, 2, 3, 9, 15};
    const std::vector<float> inv_freq = RopeInvFreq(head_dim, 1000000.0f, RopeScaling{});
    DeviceVector<float> dqkv(qkv), dnormed(qkv), dqw(qw), dkw(kw), dfreq(inv_freq);
    DeviceVector<int32_t> dpos(positions);
    DeviceVector<int64_t> dslots(slots);
    ASSERT_TRUE(LaunchHeadRmsNorm({dnormed.get(), rows, width, heads, kv_heads, head_dim, dqw.get(), dkw.get(), 1e-6f},
                                  stream_).ok());
    Planes init(int64_t{slots_total} * kvd);
    DeviceVector<float> q_want{std::vector<float>(rows * qd, NAN)}, q_got{std::vector<float>(rows * qd, NAN)};
    DeviceVector<uint16_t> rot_want(init.k_rot), raw_want(init.k_raw), v_want(init.v);
    DeviceVector<uint16_t> rot_got(init.k_rot), raw_got(init.k_raw), v_got(init.v);
    QkvPlaceParams two{dnormed.get(), nullptr, dpos.get(), dslots.get(), rows, heads, kv_heads, head_dim, dfreq.get(),
                       q_want.get(), rot_want.get(), raw_want.get(), v_want.get()};
    ASSERT_TRUE(LaunchQkvRopePlace(two, stream_).ok());
    QkvPlaceParams one{dqkv.get(), nullptr, dpos.get(), dslots.get(), rows, heads, kv_heads, head_dim, dfreq.get(),
                       q_got.get(), rot_got.get(), raw_got.get(), v_got.get(), dqw.get(), dkw.get(), 1e-6f};
    ASSERT_TRUE(LaunchQkvRopePlace(one, stream_).ok());
    Sync();
    ExpectFloatNear(q_got.ToHost(), q_want.ToHost(), what + " q");
    ExpectBf16Near(raw_got.ToHost(), raw_want.ToHost(), 1, what + " K before RoPE");
    ExpectBf16Near(rot_got.ToHost(), rot_want.ToHost(), 1, what + " rotated K");
    EXPECT_EQ(v_got.ToHost(), v_want.ToHost()) << what << ": V";
  }
  QkvPlaceParams half{nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 64, nullptr, nullptr, nullptr, nullptr, nullptr};
  half.q_norm = reinterpret_cast<const float*>(16);
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchQkvRopePlace(half, stream_))) << "a q norm without a k norm";
}

TEST_F(CudaModelKernelsTest, PlaceStoredKvMatchesCpuOverLayers) {
  const int layers = 3, chunk = 16, n = 11, kv_heads = 2, head_dim = 64, slots_total = 32;
  const int kvd = kv_heads * head_dim;
  const int64_t stride = int64_t{slots_total} * kvd;
  const std::vector<uint16_t> stored = ToBf16Vector(RandomFloats(int64_t{layers} * 2 * chunk * kvd, 11, -3, 3));
  std::vector<int32_t> positions(n);
  std::vector<int64_t> slots(n);
  for (int i = 0; i < n; ++i) {
    positions[i] = 300 + i;
    slots[i] = (i * 7) % slots_total;
  }
  const std::vector<float> inv_freq = RopeInvFreq(head_dim, 10000.0f, RopeScaling{});
  Planes host(stride * layers);
  StoredKvParams hp{n, layers, chunk, kv_heads, head_dim, positions.data(), slots.data(), inv_freq.data(), stride,
                    host.k_rot.data(), host.k_raw.data(), host.v.data()};
  PlaceStoredKv(stored.data(), hp);
  Planes init(stride * layers);
  DeviceVector<uint16_t> dstored(stored), rot(init.k_rot), raw(init.k_raw), val(init.v);
  DeviceVector<int32_t> dpos(positions);
  DeviceVector<int64_t> dslots(slots);
  DeviceVector<float> dfreq(inv_freq);
  StoredKvParams dp{n, layers, chunk, kv_heads, head_dim, dpos.get(), dslots.get(), dfreq.get(), stride,
                    rot.get(), raw.get(), val.get()};
  ASSERT_TRUE(LaunchPlaceStoredKv(dstored.get(), dp, stream_).ok());
  Sync();
  EXPECT_EQ(raw.ToHost(), host.k_raw);
  EXPECT_EQ(val.ToHost(), host.v);
  ExpectBf16Near(rot.ToHost(), host.k_rot, 1, "rotated K");
}

// A read buffer of one layer: three chunks' blocks, the last one short (its tail slots
// -1), placed into one layer's planes in one launch; the CPU twin places the same.
TEST_F(CudaModelKernelsTest, PlaceStoredKvPlacesOneLayerOfManyChunks) {
  const int chunks = 3, chunk = 16, kv_heads = 2, head_dim = 128, slots_total = 64;
  const int kvd = kv_heads * head_dim;
  // Blocks 3 apart, as in a read buffer that holds 3 layers of each chunk.
  const int64_t block = int64_t{3} * 2 * chunk * kvd;
  const std::vector<uint16_t> stored = ToBf16Vector(RandomFloats(int64_t{chunks} * block, 12, -3, 3));
  std::vector<int32_t> positions(chunks * chunk);
  std::vector<int64_t> slots(chunks * chunk);
  const int total = 2 * chunk + 5;  // the last chunk holds 5 tokens
  for (int t = 0; t < chunks * chunk; ++t) {
    positions[t] = 1000 + t;
    slots[t] = t < total ? (t * 5 + 3) % slots_total : -1;
  }
  const std::vector<float> inv_freq = RopeInvFreq(head_dim, 500000.0f, RopeScaling{});
  const int64_t plane = int64_t{slots_total} * kvd;
  Planes host(plane);
  StoredKvParams hp{chunk, chunks, chunk, kv_heads, head_dim, positions.data(), slots.data(), inv_freq.data(), 0,
                    host.k_rot.data(), host.k_raw.data(), host.v.data(), chunk, block};
  PlaceStoredKv(stored.data(), hp);
  // Every token landed where its slot says (the short chunk's tail placed nothing).
  int placed = 0;
  for (int64_t s = 0; s < slots_total; ++s) placed += host.k_raw[s * kvd] != 0x7fc1;
  EXPECT_EQ(placed, total);
  Planes init(plane);
  DeviceVector<uint16_t> dstored(stored), rot(init.k_rot), raw(init.k_raw), val(init.v);
  DeviceVector<int32_t> dpos(positions);
  DeviceVector<int64_t> dslots(slots);
  DeviceVector<float> dfreq(inv_freq);
  StoredKvParams dp{chunk, chunks, chunk, kv_heads, head_dim, dpos.get(), dslots.get(), dfreq.get(), 0,
                    rot.get(), raw.get(), val.get(), chunk, block};
  ASSERT_TRUE(LaunchPlaceStoredKv(dstored.get(), dp, stream_).ok());
  Sync();
  EXPECT_EQ(raw.ToHost(), host.k_raw);
  EXPECT_EQ(val.ToHost(), host.v);
  ExpectBf16Near(rot.ToHost(), host.k_rot, 1, "rotated K");
  dp.index_stride = chunk - 1;  // shorter than a block: refused
  EXPECT_FALSE(LaunchPlaceStoredKv(dstored.get(), dp, stream_).ok());
}

TEST_F(CudaModelKernelsTest, GatherRowsBf16CopiesRows) {
  const int rows = 9, dim = 300;
  const std::vector<uint16_t> in = ToBf16Vector(RandomFloats(rows * dim, 2));
  const std::vector<int32_t> pick = {8, 0, 3};
  std::vector<uint16_t> want(pick.size() * dim);
  GatherRowsBf16(in.data(), pick.data(), 3, dim, want.data());
  DeviceVector<uint16_t> din(in), dout{std::vector<uint16_t>(want.size(), 0)};
  DeviceVector<int32_t> dpick(pick);
  ASSERT_TRUE(LaunchGatherRowsBf16({din.get(), dpick.get(), 3, dim, dout.get()}, stream_).ok());
  Sync();
  EXPECT_EQ(dout.ToHost(), want);
}

// The device sampler against SampleToken over temperatures, top_p values (nucleus and
// whole-vocabulary), ties, -inf logits and many u. The two reduce their double sums in
// different orders, so a u within rounding of a boundary may pick the neighbour: allowed
// at most once in 200 draws; greedy must always agree.
TEST_F(CudaModelKernelsTest, SampleMatchesSampleToken) {
  std::mt19937 gen(42);
  for (int vocab : {7, 1000, 50000}) {
    const int rows = 200;
    std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, vocab, -4, 4);
    for (int r = 0; r < rows; ++r) {
      float* row = logits.data() + static_cast<int64_t>(r) * vocab;
      if (r % 5 == 0) row[(r * 13) % vocab] = -INFINITY;
      if (r % 7 == 0) row[vocab - 1] = row[0];  // a tie
      if (r % 11 == 0) {
        for (int i = 0; i < vocab; i += 3) row[i] = 1.5f;  // many ties
      }
    }
    std::vector<float> temperature(rows), top_p(rows);
    std::vector<double> u(rows);
    const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.7f};
    const float tops[] = {1.0f, 0.95f, 0.9f, 0.5f, 0.05f, 0.0f};
    std::uniform_real_distribution<double> unif(0.0, 1.0);
    for (int r = 0; r < rows; ++r) {
      temperature[r] = temps[r % 5];
      top_p[r] = tops[(r / 5) % 6];
      u[r] = unif(gen);
    }
    DeviceVector<float> dl(logits), dt(temperature), dp(top_p);
    DeviceVector<double> du(u);
    DeviceVector<int32_t> ids{std::vector<int32_t>(rows, -1)};
    ASSERT_TRUE(LaunchSample({dl.get(), rows, vocab, dt.get(), dp.get(), du.get(), ids.get()}, stream_).ok());
    Sync();
    const std::vector<int32_t> got = ids.ToHost();
    int differ = 0;
    for (int r = 0; r < rows; ++r) {
      const int32_t want = SampleToken(logits.data() + static_cast<int64_t>(r) * vocab, vocab, temperature[r],
                                       top_p[r], u[r]);
      if (got[r] != want) {
        ++differ;
        EXPECT_GT(temperature[r], 0) << "greedy row " << r << " of vocab " << vocab << ": " << got[r] << " vs " << want;
      }
    }
    EXPECT_LE(differ, 1) << "vocab " << vocab << ": the device drew another token than SampleToken in " << differ
                         << " of " << rows << " rows";
  }
}

// A nucleus smaller than any one token's probability keeps just the most probable token,
// whatever u (top_p far below the sampler's fixed-point unit included).
TEST_F(CudaModelKernelsTest, TinyTopPKeepsTheMostProbableToken) {
  const int vocab = 5000, rows = 8;
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 99, -3, 3);
  for (int r = 0; r < rows; ++r) logits[static_cast<size_t>(r) * vocab + (r * 577) % vocab] = 3.5f;
  const std::vector<float> temperature(rows, 0.9f);
  const std::vector<float> top_p = {1e-15f, 1e-30f, 1e-6f, 1e-3f, 1e-15f, 1e-9f, 1e-20f, 1e-4f};
  const std::vector<double> u = {0.0, 0.99, 0.5, 0.25, 0.999999, 0.1, 0.75, 0.6};
  DeviceVector<float> dl(logits), dt(temperature), dp(top_p);
  DeviceVector<double> du(u);
  DeviceVector<int32_t> ids{std::vector<int32_t>(rows, -1)};
  ASSERT_TRUE(LaunchSample({dl.get(), rows, vocab, dt.get(), dp.get(), du.get(), ids.get()}, stream_).ok());
  Sync();
  const std::vector<int32_t> got = ids.ToHost();
  for (int r = 0; r < rows; ++r) {
    const int32_t want = SampleToken(logits.data() + static_cast<int64_t>(r) * vocab, vocab, 0.9f, top_p[r], u[r]);
    EXPECT_EQ(want, (r * 577) % vocab) << "row " << r;
    EXPECT_EQ(got[r], want) << "row " << r << " top_p " << top_p[r];
  }
}

TEST_F(CudaModelKernelsTest, BadSizesAreRefusedBeforeLaunch) {
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchToBf16({nullptr, nullptr, -1}, stream_)));
  QkvPlaceParams p{};
  p.rows = 1;
  p.num_heads = 1;
  p.kv_heads = 1;
  p.head_dim = 7;
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchQkvRopePlace(p, stream_)));
}

}  // namespace
}  // namespace strata::kernels
