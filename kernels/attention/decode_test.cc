// The CUDA twins against the CPU specification, on random inputs over a grid of shapes.
// Tolerance: fp32, 1e-5 relative to max(1, |expected|) (inputs are O(1)).
#include "kernels/attention/decode.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/attention/attention_cpu.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/elementwise/elementwise_cpu.h"
#include "kernels/norm/norm_cpu.h"
#include "kernels/rope/rope_cpu.h"
#include "kernels/sampling/sampling_cpu.h"
#include "kernels/testing/attention_cpu.h"
#include "kernels/testing/elementwise_cpu.h"
#include "kernels/testing/norm_cpu.h"
#include "kernels/testing/rope_cpu.h"
#include "kernels/attention/prefill.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sampling/sampling.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/paged_pool.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;

std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  return test_support::RandomFloats(n, seed, lo, hi);
}

constexpr double kTolerance = 1e-5;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = kTolerance * std::max(1.0, std::abs(static_cast<double>(want[i])));
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= tol) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " on the GPU, " << want[i]
                    << " on the CPU";
    }
  }
}

class CudaKernelsTest : public test_support::GpuTest {};

TEST_F(CudaKernelsTest, RmsNormMatchesCpu) {
  for (int rows : {1, 3, 17}) {
    for (int dim : {1, 37, 256, 1000, 4096}) {
      const std::string what = "rows " + std::to_string(rows) + " dim " + std::to_string(dim);
      const std::vector<float> x = RandomVector(static_cast<size_t>(rows) * dim, rows + dim, -3, 3);
      const std::vector<float> w = RandomVector(dim, 7);
      std::vector<float> want(x.size());
      RmsNorm(x.data(), w.data(), want.data(), rows, dim, 1e-5f);
      DeviceVector<float> dx(x), dw(w), dy{std::vector<float>(x.size())};
      ASSERT_TRUE(LaunchRmsNorm({dx.get(), dw.get(), dy.get(), rows, dim, 1e-5f}, stream_).ok());
      // In place, as the CPU kernel allows.
      ASSERT_TRUE(LaunchRmsNorm({dx.get(), dw.get(), dx.get(), rows, dim, 1e-5f}, stream_).ok());
      Sync();
      ExpectClose(dy.ToHost(), want, what);
      ExpectClose(dx.ToHost(), want, what + " in place");
    }
  }
}

TEST_F(CudaKernelsTest, SwiGluMatchesCpu) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3, int64_t{20000000}}) {
    const std::vector<float> gate = RandomVector(n, 1, -8, 8), up = RandomVector(n, 2);
    std::vector<float> want(n);
    SwiGlu(gate.data(), up.data(), want.data(), n);
    DeviceVector<float> dg(gate), du(up), dout{std::vector<float>(n)};
    ASSERT_TRUE(LaunchSwiGlu({dg.get(), du.get(), dout.get(), n}, stream_).ok());
    ASSERT_TRUE(LaunchSwiGlu({dg.get(), du.get(), dg.get(), n}, stream_).ok());  // out = gate
    Sync();
    ExpectClose(dout.ToHost(), want, "n " + std::to_string(n));
    ExpectClose(dg.ToHost(), want, "n " + std::to_string(n) + " in place");
  }
}

TEST_F(CudaKernelsTest, EmbedMatchesCpu) {
  for (int dim : {1, 64, 1000}) {
    const int vocab = 50;
    const std::vector<float> table = RandomVector(static_cast<size_t>(vocab) * dim, dim);
    const std::vector<int32_t> ids = {49, 0, 7, 7, 13};
    const int rows = static_cast<int>(ids.size());
    std::vector<float> want(static_cast<size_t>(rows) * dim);
    Embed(table.data(), ids.data(), rows, dim, want.data());
    DeviceVector<float> dt(table), dout{std::vector<float>(want.size())};
    DeviceVector<int32_t> did(ids);
    ASSERT_TRUE(LaunchEmbed({dt.get(), did.get(), rows, dim, dout.get()}, stream_).ok());
    Sync();
    const std::vector<float> got = dout.ToHost();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << "dim " << dim << ": rows are not exact copies";
  }
}

TEST_F(CudaKernelsTest, ApplyRopeMatchesCpu) {
  struct Shape {
    int rows, heads, head_dim;
  };
  RopeScaling llama3;
  llama3.llama3 = true;
  for (const Shape& s : {Shape{1, 1, 2}, Shape{5, 4, 64}, Shape{7, 3, 128}}) {
    for (const RopeScaling& scaling : {RopeScaling{}, llama3}) {
      const std::string what = "rows " + std::to_string(s.rows) + " heads " +
                               std::to_string(s.heads) + " head_dim " + std::to_string(s.head_dim) +
                               (scaling.llama3 ? " llama3" : "");
      const std::vector<float> inv_freq = RopeInvFreq(s.head_dim, 500000.0f, scaling);
      std::vector<int32_t> positions(s.rows);
      for (int r = 0; r < s.rows; ++r) positions[r] = r * r * 997;  // up to ~36000
      const std::vector<float> x =
          RandomVector(static_cast<size_t>(s.rows) * s.heads * s.head_dim, s.head_dim);
      std::vector<float> want = x;
      ApplyRope(want.data(), positions.data(), s.rows, s.heads, s.head_dim, inv_freq.data());
      DeviceVector<float> dx(x), df(inv_freq);
      DeviceVector<int32_t> dp(positions);
      ASSERT_TRUE(
          LaunchApplyRope({dx.get(), dp.get(), s.rows, s.heads, s.head_dim, df.get()}, stream_).ok());
      Sync();
      ExpectClose(dx.ToHost(), want, what);
    }
  }
}

// These need no device: bad sizes are refused before anything is launched.
TEST(CudaLaunchTest, RejectsBadSizes) {
  EXPECT_EQ(LaunchRmsNorm({nullptr, nullptr, nullptr, -1, 8, 1e-5f}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchSwiGlu({nullptr, nullptr, nullptr, -5}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchEmbed({nullptr, nullptr, 2, -1, nullptr}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchApplyRope({nullptr, nullptr, 1, 1, 3, nullptr}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchRmsNorm({nullptr, nullptr, nullptr, 0, 8, 1e-5f}, nullptr).ok())
      << "zero rows is an empty launch";
}

absl::Status FailingCall() {
  STRATA_CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}

absl::Status SucceedingCall() {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSuccess);
  return absl::OkStatus();
}

TEST(CudaCheckTest, ReturnIfErrorNamesCallErrorAndLocation) {
  const absl::Status s = FailingCall();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("decode_test.cc:"), absl::string_view::npos) << s;
  EXPECT_TRUE(SucceedingCall().ok());
}

// Device copies of a paged pool and a view over them.
struct DevicePool {
  explicit DevicePool(const test_support::PagedPool& p)
      : k(p.k), v(p.v), indptr(p.indptr), indices(p.indices), last(p.last_page_len) {
    view = PagedKv{k.get(), v.get(), p.page_size, p.kv_heads, p.head_dim, indptr.get(), indices.get(), last.get()};
  }
  DeviceVector<uint16_t> k, v;
  DeviceVector<int32_t> indptr, indices, last;
  PagedKv view;
};

TEST_F(CudaKernelsTest, PagedDecodeAttentionMatchesCpu) {
  for (int head_dim : {64, 80, 96, 128, 256}) {
    for (int group : {1, 3, 4, 5, 7, 8, 9, 11, 12, 16}) {  // past 8: subgroups
      const std::vector<int64_t> lengths = {1, 255, 256, 257, 1000, 4100};
      // Pages of 16 tokens, and of 12 for some groups (a size the kernel must divide by).
      const int kv_heads = 2, heads = kv_heads * group, page_size = group % 2 == 1 ? 12 : 16;
      const std::string what = "head_dim " + std::to_string(head_dim) + " group " + std::to_string(group) +
                               " page " + std::to_string(page_size);
      const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, page_size, kv_heads, head_dim, head_dim + group);
      const int batch = static_cast<int>(lengths.size());
      const std::vector<float> q = RandomVector(static_cast<size_t>(batch) * heads * head_dim, group);
      std::vector<float> want(q.size()), want_lse(static_cast<size_t>(batch) * heads);
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      PagedDecodeAttention(q.data(), pool.View(), batch, heads, scale, want.data(), want_lse.data());
      DevicePool dp(pool);
      DeviceVector<float> dq(q), dout{std::vector<float>(q.size(), std::nanf(""))},
          dlse{std::vector<float>(want_lse.size(), std::nanf(""))},
          ws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(batch, heads, head_dim, 4100)))};
      // The CUDA-core kernel, exact to fp32 rounding (the tensor-core decode, bf16 Q, is
      // checked in prefill_test.cc to bf16 tolerances).
      ASSERT_TRUE(LaunchPagedDecodeAttention({dq.get(), dp.view, batch, heads, scale, 4100, ws.get(), dout.get(),
                                             dlse.get(), DecodeKernel::kCudaCores}, stream_)
                      .ok());
      Sync();
      ExpectClose(dout.ToHost(), want, what + " out");
      ExpectClose(dlse.ToHost(), want_lse, what + " lse");
    }
  }
  // Shapes the kernel does not take are refused before anything runs.
  test_support::PagedPool odd = test_support::RandomPagedPool({4}, 16, 1, 48, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(
      LaunchPagedDecodeAttention({nullptr, odd.View(), 1, 1, 1.0f, 4, nullptr, nullptr, nullptr}, stream_)));
}

// kAuto's choice on the shapes decode_attention_bench measured (docs/BENCHMARKS.md): the
// tensor cores where they were faster, the CUDA cores where those were as fast or faster.
// On a device of fast memory (an H200, not an H100) GQA 4 at head_dim 80, 96 and 128 takes
// the tensor cores too.
TEST(DecodeKernelRuleTest, TakesTheTensorCoresWhereTheyWereMeasuredFaster) {
  const bool fast_memory = CurrentDevicePeakMemoryBandwidth() >= kTensorCoreDecodeFastMemoryBandwidth;
  struct Case {
    int head_dim, heads, kv_heads, batch;
    int64_t tokens;
    bool tensor_cores;
  };
  const Case cases[] = {
      {128, 32, 8, 64, 1024, false},  // Llama-3-8B (GQA 4): CUDA cores everywhere (fast memory: tensor)
      {128, 32, 8, 8, 8192, false},   {128, 32, 8, 1, 32768, false},
      {128, 28, 4, 32, 1024, true},   // Qwen2.5-7B (GQA 7): tensor cores everywhere
      {128, 28, 4, 8, 1024, true},    {128, 28, 4, 1, 1024, true},    {128, 28, 4, 1, 8192, true},
      {64, 14, 2, 1, 4096, true},     {128, 12, 2, 2, 2048, true},   // Qwen2.5-0.5B (GQA 7), -1.5B (GQA 6)
      {128, 40, 8, 1, 8192, true},    // Qwen2.5-14B (GQA 5)
      {128, 64, 8, 8, 1024, true},    {128, 64, 8, 1, 1024, true},   // Llama-3-70B (GQA 8)
      {80, 32, 8, 8, 1024, true},     {80, 32, 8, 64, 8192, true},   {80, 32, 8, 1, 8192, false},  // head_dim 80
      {96, 32, 8, 8, 8192, false},    {64, 32, 8, 64, 1024, false},  {256, 16, 8, 64, 8192, false},
  };
  for (const Case& c : cases) {
    const bool gqa4_on_fast_memory =
        fast_memory && c.heads / c.kv_heads == 4 && (c.head_dim == 80 || c.head_dim == 96 || c.head_dim == 128);
    EXPECT_EQ(DecodeRunsOnTensorCores(DecodeKernel::kAuto, c.head_dim, c.heads, c.kv_heads, c.batch, c.tokens),
              c.tensor_cores || gqa4_on_fast_memory)
        << "head_dim " << c.head_dim << ", " << c.heads << ":" << c.kv_heads << " heads, batch " << c.batch << " x "
        << c.tokens;
  }
}

TEST_F(CudaKernelsTest, PagedDecodeAttentionMergesIntoAnOutputOffTheFloat4Grid) {
  // Two long sequences split in many parts: the merge writes `out`; one float past a 16-byte
  // boundary it takes the block-per-row merge instead of the float4 one, with the same
  // result. The tensor-core form (float2 stores) refuses such an out; kAuto on a shape it
  // would take falls back to the CUDA cores.
  const std::vector<int64_t> lengths = {3000, 4100};
  const int kv_heads = 2, heads = 8, head_dim = 128, batch = 2;
  const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, 16, kv_heads, head_dim, 91);
  const std::vector<float> q = RandomVector(static_cast<size_t>(batch) * heads * head_dim, 92);
  std::vector<float> want(q.size()), want_lse(static_cast<size_t>(batch) * heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  PagedDecodeAttention(q.data(), pool.View(), batch, heads, scale, want.data(), want_lse.data());
  DevicePool dp(pool);
  for (DecodeKernel kernel : {DecodeKernel::kCudaCores, DecodeKernel::kTensorCores}) {
    std::vector<float> aligned, aligned_lse;  // offset 0's results
    for (int offset : {0, 1}) {
      DeviceVector<float> dq(q), dout{std::vector<float>(q.size() + 1, std::nanf(""))},
          dlse{std::vector<float>(want_lse.size() + 1, std::nanf(""))},
          ws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(batch, heads, head_dim, 4100)))};
      const absl::Status launched = LaunchPagedDecodeAttention(
          {dq.get(), dp.view, batch, heads, scale, 4100, ws.get(), dout.get() + offset, dlse.get() + offset, kernel},
          stream_);
      if (kernel == DecodeKernel::kTensorCores && offset == 1) {
        EXPECT_TRUE(absl::IsInvalidArgument(launched)) << launched;
        Sync();
        EXPECT_TRUE(std::isnan(dout.ToHost()[1])) << "a refused launch wrote out";
        // kAuto on a shape the rule gives the tensor cores (8 heads a block) takes the CUDA cores.
        const int wide_heads = kv_heads * 8;
        const std::vector<float> wq = RandomVector(static_cast<size_t>(batch) * wide_heads * head_dim, 93);
        std::vector<float> wwant(wq.size()), wwant_lse(static_cast<size_t>(batch) * wide_heads);
        PagedDecodeAttention(wq.data(), pool.View(), batch, wide_heads, scale, wwant.data(), wwant_lse.data());
        DeviceVector<float> dwq(wq), dwout{std::vector<float>(wq.size() + 1, std::nanf(""))},
            dwws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(batch, wide_heads, head_dim, 4100)))};
        ASSERT_TRUE(LaunchPagedDecodeAttention({dwq.get(), dp.view, batch, wide_heads, scale, 4100, dwws.get(),
                                                dwout.get() + 1, nullptr},
                                               stream_)
                        .ok());
        Sync();
        std::vector<float> wgot = dwout.ToHost();
        wgot.erase(wgot.begin());
        ExpectClose(wgot, wwant, "kAuto, 8 heads a block, out off the float2 grid (CUDA cores: fp32-exact)");
        continue;
      }
      ASSERT_TRUE(launched.ok()) << launched;
      Sync();
      std::vector<float> got = dout.ToHost(), got_lse = dlse.ToHost();
      got.erase(got.begin(), got.begin() + offset);
      got.resize(want.size());
      got_lse.erase(got_lse.begin(), got_lse.begin() + offset);
      got_lse.resize(want_lse.size());
      const std::string what = std::string(kernel == DecodeKernel::kCudaCores ? "CUDA cores" : "tensor cores") +
                               " offset " + std::to_string(offset);
      if (kernel == DecodeKernel::kCudaCores) {
        ExpectClose(got, want, what + " out");
        ExpectClose(got_lse, want_lse, what + " lse");
      } else {  // bf16 Q and P: to bf16 tolerance
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-2) << what << " out " << i;
        for (size_t i = 0; i < want_lse.size(); ++i) ASSERT_NEAR(got_lse[i], want_lse[i], 2e-2) << what << " lse " << i;
      }
      if (offset == 0) {
        aligned = got;
        aligned_lse = got_lse;
      } else {  // the two merges agree to fp32 rounding
        ExpectClose(got, aligned, what + " out vs the float4 merge");
        ExpectClose(got_lse, aligned_lse, what + " lse vs the float4 merge");
      }
    }
  }
}

// With out_bf16 the decode writes the o projection's input itself: the same bits as its
// fp32 output cast by ToBf16, whether the merge writes them (split parts), the CUDA-core
// kernel stores its one part, or the launch casts the tensor cores' one part; an out_bf16
// off the 8-byte grid is refused.
TEST_F(CudaKernelsTest, PagedDecodeAttentionWritesBf16AsItsOutputCast) {
  const int kv_heads = 4, head_dim = 128;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // (heads, lengths): few long sequences split into parts; many short ones take one part.
  for (auto [heads, lengths] : {std::pair{28, std::vector<int64_t>{3000, 4100}},
                                {32, std::vector<int64_t>(300, 40)}, {28, std::vector<int64_t>(200, 64)}}) {
    const int batch = static_cast<int>(lengths.size());
    const int64_t max_tokens = *std::max_element(lengths.begin(), lengths.end());
    const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, 16, kv_heads, head_dim, 95);
    const std::vector<float> q = RandomVector(static_cast<size_t>(batch) * heads * head_dim, 96);
    DevicePool dp(pool);
    for (int form = 0; form < 3; ++form) {  // CUDA cores, tensor cores, tensor cores in two-warp blocks
      const DecodeKernel kernel = form == 0 ? DecodeKernel::kCudaCores : DecodeKernel::kTensorCores;
      SetTensorCoreDecodeKeyWarpsForTesting(form == 2 ? KeyWarps::kAlways : KeyWarps::kNever);
      const std::string what = std::to_string(heads) + " heads, batch " + std::to_string(batch) +
                               (form == 0 ? ", CUDA cores" : form == 1 ? ", tensor cores" : ", two-warp tensor cores");
      DeviceVector<float> dq(q), dout{std::vector<float>(q.size())},
          ws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(batch, heads, head_dim, max_tokens)))};
      DeviceVector<uint16_t> cast{std::vector<uint16_t>(q.size())}, direct{std::vector<uint16_t>(q.size() + 4, 0xffff)};
      ASSERT_TRUE(LaunchPagedDecodeAttention(
                      {dq.get(), dp.view, batch, heads, scale, max_tokens, ws.get(), dout.get(), nullptr, kernel}, stream_)
                      .ok())
          << what;
      ASSERT_TRUE(LaunchToBf16({dout.get(), cast.get(), static_cast<int64_t>(q.size())}, stream_).ok());
      DecodeAttentionParams p{dq.get(), dp.view, batch, heads, scale, max_tokens, ws.get(), dout.get(), nullptr, kernel};
      p.out_bf16 = direct.get();
      ASSERT_TRUE(LaunchPagedDecodeAttention(p, stream_).ok()) << what;
      Sync();
      const std::vector<uint16_t> want = cast.ToHost(), got = direct.ToHost();
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(uint16_t))) << what;
      EXPECT_EQ(got[q.size()], 0xffff) << what << ": wrote past the rows";
      p.out_bf16 = direct.get() + 1;
      EXPECT_TRUE(absl::IsInvalidArgument(LaunchPagedDecodeAttention(p, stream_))) << what;
    }
  }
  SetTensorCoreDecodeKeyWarpsForTesting(KeyWarps::kAuto);
}

TEST_F(CudaKernelsTest, TwoWarpTensorCoreDecodeMatchesTheOneWarpForm) {
  // Blocks of two and of four warps that split a part's key tiles and merge in shared
  // memory, against one-warp blocks: within bf16 rounding of the probabilities, over GQA 7
  // (Qwen2.5-7B's shape), 8 and 2, head_dims 128, 64 and 80, uneven lengths (a part shorter
  // than two tiles or than four, an odd tile count, an empty sequence), one part and three.
  // The launch's own rule takes them where it picks two parts, or where a part's blocks
  // number about one an SM.
  struct Case {
    int heads, kv_heads, head_dim;
    std::vector<int64_t> lengths;
  };
  const Case cases[] = {{28, 4, 128, {1000, 33, 0, 2049, 64}}, {16, 2, 128, {700, 1500}},
                        {16, 8, 64, {95, 1024}},           {32, 8, 80, {513, 31, 4100}},
                        {14, 2, 64, {1000, 65, 7, 4100}}};
  for (const Case& c : cases) {
    const int batch = static_cast<int>(c.lengths.size());
    const int64_t max_tokens = *std::max_element(c.lengths.begin(), c.lengths.end());
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const test_support::PagedPool pool = test_support::RandomPagedPool(c.lengths, 16, c.kv_heads, c.head_dim, 61);
    const std::vector<float> q = RandomVector(static_cast<size_t>(batch) * c.heads * c.head_dim, 62);
    DevicePool dp(pool);
    DeviceVector<float> dq(q),
        ws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(batch, c.heads, c.head_dim, max_tokens)))};
    for (int parts : {1, 3}) {
      SetTensorCoreDecodePartsForBenchmarks(parts);
      std::vector<float> outs[3], lses[3];
      for (KeyWarps mode : {KeyWarps::kNever, KeyWarps::kAlways, KeyWarps::kFour}) {
        SetTensorCoreDecodeKeyWarpsForTesting(mode);
        DeviceVector<float> dout{std::vector<float>(q.size(), std::nanf(""))},
            dlse{std::vector<float>(static_cast<size_t>(batch) * c.heads, std::nanf(""))};
        ASSERT_TRUE(LaunchPagedDecodeAttention({dq.get(), dp.view, batch, c.heads, scale, max_tokens, ws.get(),
                                               dout.get(), dlse.get(), DecodeKernel::kTensorCores},
                                              stream_)
                        .ok());
        Sync();
        const int m = mode == KeyWarps::kNever ? 0 : mode == KeyWarps::kAlways ? 1 : 2;
        outs[m] = dout.ToHost();
        lses[m] = dlse.ToHost();
      }
      for (int m : {1, 2}) {
        const std::string what = std::to_string(c.heads) + ":" + std::to_string(c.kv_heads) + "x" +
                                 std::to_string(c.head_dim) + ", parts " + std::to_string(parts) +
                                 (m == 1 ? ", two warps" : ", four warps");
        double worst = 0, worst_lse = 0;
        for (size_t i = 0; i < q.size(); ++i) worst = std::max(worst, std::abs(double{outs[m][i]} - outs[0][i]));
        for (size_t i = 0; i < lses[0].size(); ++i) {
          if (std::isinf(lses[0][i]) || std::isinf(lses[m][i])) {
            EXPECT_EQ(lses[0][i], lses[m][i]) << what << ": an empty sequence's lse, head " << i;
          } else {
            worst_lse = std::max(worst_lse, std::abs(double{lses[m][i]} - lses[0][i]));
          }
        }
        // Outputs are O(1) averages of values in [-1, 1]; P is rounded to bf16 per tile.
        EXPECT_LT(worst, 2e-3) << what;
        EXPECT_LT(worst_lse, 1e-4) << what;
      }
    }
  }
  SetTensorCoreDecodeKeyWarpsForTesting(KeyWarps::kAuto);
  SetTensorCoreDecodePartsForBenchmarks(0);
}

TEST_F(CudaKernelsTest, PagedDecodeAttentionLargeBatchOnePartMatchesCpu) {
  // Enough sequences x KV heads to fill the device without splitting (one part per
  // sequence, written straight to out), 32-token pages, two query heads per KV head.
  std::vector<int64_t> lengths;
  for (int b = 0; b < 48; ++b) lengths.push_back(1 + (b * 397) % 2100);
  const int kv_heads = 8, heads = 16, head_dim = 128, page_size = 32, batch = static_cast<int>(lengths.size());
  const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, page_size, kv_heads, head_dim, 77);
  const std::vector<float> q = RandomVector(static_cast<size_t>(batch) * heads * head_dim, 78);
  std::vector<float> want(q.size()), want_lse(static_cast<size_t>(batch) * heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  PagedDecodeAttention(q.data(), pool.View(), batch, heads, scale, want.data(), want_lse.data());
  DevicePool dp(pool);
  DeviceVector<float> dq(q), ws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(batch, heads, head_dim, 2100)))};
  // One part a sequence; then split by a typical length of a quarter of the longest: the
  // long rows in four parts, the short ones' later parts empty.
  for (int64_t typical : {0, 525}) {
    DeviceVector<float> dout{std::vector<float>(q.size(), std::nanf(""))},
        dlse{std::vector<float>(want_lse.size(), std::nanf(""))};
    DecodeAttentionParams p{dq.get(), dp.view, batch, heads, scale, 2100, ws.get(), dout.get(), dlse.get()};
    p.typical_tokens = typical;
    ASSERT_TRUE(LaunchPagedDecodeAttention(p, stream_).ok());
    Sync();
    ExpectClose(dout.ToHost(), want, "large batch out, typical " + std::to_string(typical));
    ExpectClose(dlse.ToHost(), want_lse, "large batch lse, typical " + std::to_string(typical));
  }
}

TEST_F(CudaKernelsTest, PlaceKvPagedMatchesCpuWithinOneBf16Unit) {
  const int n = 300, kv_heads = 8, head_dim = 128, pool_slots = 512;
  const int64_t row = kv_heads * head_dim;
  const std::vector<float> k = RandomVector(n * row, 3, -4, 4), v = RandomVector(n * row, 4, -4, 4);
  std::vector<int32_t> positions(n);
  std::vector<int64_t> slots(n);
  for (int i = 0; i < n; ++i) {
    positions[i] = i * 37 % 8000;
    slots[i] = (i * 7 + 3) % pool_slots;  // 7 is coprime with 512: distinct slots
  }
  const std::vector<float> inv_freq = RopeInvFreq(head_dim, 500000.0f, RopeScaling{});
  std::vector<uint16_t> want_k(pool_slots * row, 0), want_v(pool_slots * row, 0);
  PlaceKvPaged(k.data(), v.data(), positions.data(), slots.data(), n, kv_heads, head_dim, inv_freq.data(),
               want_k.data(), want_v.data());
  DeviceVector<float> dk(k), dv(v), dfreq(inv_freq);
  DeviceVector<int32_t> dpos(positions);
  DeviceVector<int64_t> dslots(slots);
  DeviceVector<uint16_t> kp{std::vector<uint16_t>(pool_slots * row, 0)}, vp{std::vector<uint16_t>(pool_slots * row, 0)};
  ASSERT_TRUE(LaunchPlaceKvPaged({dk.get(), dv.get(), dpos.get(), dslots.get(), n, kv_heads, head_dim, dfreq.get(),
                                 kp.get(), vp.get()}, stream_)
                  .ok());
  Sync();
  const std::vector<uint16_t> got_k = kp.ToHost(), got_v = vp.ToHost();
  EXPECT_EQ(got_v, want_v);
  int64_t off_by_one = 0;
  for (size_t i = 0; i < got_k.size(); ++i) {
    const float g = Bf16ToFloat(got_k[i]), w = Bf16ToFloat(want_k[i]);
    ASSERT_LE(std::fabs(g - w), std::fabs(w) / 128 + 1e-6f) << "element " << i;  // one bf16 unit
    off_by_one += got_k[i] != want_k[i];
  }
  EXPECT_LT(off_by_one, static_cast<int64_t>(got_k.size()) / 100) << "bf16 ties should be rare";
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchPlaceKvPaged({nullptr, nullptr, nullptr, nullptr, 1, 1, 3, nullptr, nullptr,
                                                         nullptr}, stream_)));
}

TEST_F(CudaKernelsTest, PagedPrefillAttentionMatchesCpu) {
  for (int head_dim : {64, 128}) {
    // New tokens per sequence within lengths that cross part boundaries (256 tokens).
    const std::vector<int64_t> lengths = {7, 300, 600, 1};
    const std::vector<int32_t> qo_indptr = {0, 7, 47, 347, 348};
    const int kv_heads = 2, heads = 8, page_size = 16, batch = 4, rows = qo_indptr.back();
    const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, page_size, kv_heads, head_dim, 21);
    const std::vector<float> q = RandomVector(static_cast<size_t>(rows) * heads * head_dim, 22);
    std::vector<float> want(q.size()), want_lse(static_cast<size_t>(rows) * heads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    PagedPrefillAttention(q.data(), pool.View(), qo_indptr.data(), batch, heads, scale, want.data(), want_lse.data());
    DevicePool dp(pool);
    DeviceVector<int32_t> dqo(qo_indptr);
    DeviceVector<float> dq(q), dout{std::vector<float>(q.size(), std::nanf(""))},
        dlse{std::vector<float>(want_lse.size(), std::nanf(""))},
        ws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(rows, heads, head_dim, 600)))};
    ASSERT_TRUE(LaunchPagedPrefillAttention({dq.get(), dp.view, dqo.get(), batch, rows, heads, scale, 600, ws.get(),
                                            dout.get(), dlse.get()}, stream_)
                    .ok());
    Sync();
    ExpectClose(dout.ToHost(), want, "prefill out head_dim " + std::to_string(head_dim));
    ExpectClose(dlse.ToHost(), want_lse, "prefill lse head_dim " + std::to_string(head_dim));
  }
}

TEST_F(CudaKernelsTest, AddRmsNormMatchesCpu) {
  for (int rows : {1, 5}) {
    for (int dim : {37, 4096}) {
      const std::string what = "rows " + std::to_string(rows) + " dim " + std::to_string(dim);
      const std::vector<float> x = RandomVector(static_cast<size_t>(rows) * dim, rows + dim, -3, 3);
      const std::vector<float> r = RandomVector(x.size(), 3 * dim, -3, 3), w = RandomVector(dim, 9);
      std::vector<float> want_r = r, want(x.size());
      AddRmsNorm(x.data(), want_r.data(), w.data(), want.data(), rows, dim, 1e-5f);
      DeviceVector<float> dx(x), dr(r), dw(w);
      ASSERT_TRUE(LaunchAddRmsNorm({dx.get(), dr.get(), dw.get(), dx.get(), rows, dim, 1e-5f}, stream_).ok());
      Sync();
      ExpectClose(dr.ToHost(), want_r, what + " residual");
      ExpectClose(dx.ToHost(), want, what + " y (in place over x)");
    }
  }
}

TEST_F(CudaKernelsTest, ArgmaxMatchesGreedySampling) {
  const int rows = 6, vocab = 128256;
  std::vector<float> logits = RandomVector(static_cast<size_t>(rows) * vocab, 41, -10, 10);
  // Row 1: a tie between two indices (the lower wins); row 2: -inf everywhere but one.
  logits[1 * vocab + 500] = 50.0f;
  logits[1 * vocab + 90000] = 50.0f;
  for (int i = 0; i < vocab; ++i) logits[2 * vocab + i] = -INFINITY;
  logits[2 * vocab + vocab - 1] = -3.0f;
  std::vector<int32_t> want(rows);
  for (int r = 0; r < rows; ++r) want[r] = SampleToken(logits.data() + int64_t{r} * vocab, vocab, 0.0f, 1.0f, 0.0);
  DeviceVector<float> dl(logits);
  DeviceVector<int32_t> ids{std::vector<int32_t>(rows, -1)};
  ASSERT_TRUE(LaunchArgmax({dl.get(), rows, vocab, ids.get()}, stream_).ok());
  Sync();
  EXPECT_EQ(ids.ToHost(), want);
  EXPECT_EQ(want[1], 500);
  EXPECT_EQ(want[2], vocab - 1);
}

}  // namespace
}  // namespace strata::kernels
