// The GPU products (kernels/gemm/gemm.h) against the CPU twin: cuBLAS and the skinny
// kernel, a row's bits independent of its batch, and the tuned cuBLAS path. Part of
// cuda_kernels_test; skipped, saying so, without a GPU.
#include "kernels/gemm/gemm.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/gemm/skinny_launch.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/gemm_cpu.h"
#include "kernels/testing/paged_pool.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;

class CudaGemmTest : public test_support::GpuTest {};

// Random bf16 operands of a product and the CPU twin's result.
struct RandomProduct {
  RandomProduct(int rows, int in_dim, int out_dim, unsigned seed)
      : x(static_cast<size_t>(rows) * in_dim), w(static_cast<size_t>(out_dim) * in_dim),
        want(static_cast<size_t>(rows) * out_dim) {
    std::mt19937 gen(seed);
    for (uint16_t& v : x) v = test_support::RandomBf16(gen);
    for (uint16_t& v : w) v = test_support::RandomBf16(gen);
    MatMulBf16(x.data(), w.data(), want.data(), rows, in_dim, out_dim);
  }
  std::vector<uint16_t> x, w;
  std::vector<float> want;
};

TEST_F(CudaGemmTest, MatMulBf16MatchesCpu) {
  // cuBLAS everywhere; the skinny kernel for 1..16 rows (K ranges of the warps not a whole
  // number of pipeline stages: 3584 = 112 chunks of 32, 28 a warp).
  for (auto [rows, in_dim, out_dim] : {std::tuple{1, 64, 96}, {7, 4096, 1024}, {64, 512, 4096}, {16, 1024, 272},
                                       {11, 2048, 4096}, {3, 14336, 512}, {9, 96, 16}, {5, 3584, 64}}) {
    const RandomProduct product(rows, in_dim, out_dim, rows + in_dim);
    const std::vector<float>& want = product.want;
    DeviceVector<uint16_t> dx(product.x), dw(product.w);
    const bool skinny = internal::SkinnyMatMulFits(dx.get(), dw.get(), rows, in_dim, out_dim);
    EXPECT_EQ(skinny, rows <= 16) << "every shape here but 64 rows fits the skinny kernel";
    for (int path = 0; path < (skinny ? 2 : 1); ++path) {
      const std::string what =
          std::to_string(rows) + "x" + std::to_string(in_dim) + "x" + std::to_string(out_dim) + (path ? " skinny" : " cuBLAS");
      DeviceVector<float> dout{std::vector<float>(want.size(), std::nanf(""))};
      const MatMulPath mp = path ? MatMulPath::kSkinny : MatMulPath::kCublas;
      ASSERT_TRUE(LaunchMatMulBf16({dx.get(), dw.get(), dout.get(), rows, in_dim, out_dim, mp}, stream_).ok());
      Sync();
      // fp32 sums of exact products in another order: relative to the sum's scale.
      const std::vector<float> got = dout.ToHost();
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_FALSE(std::isnan(got[i])) << what << " element " << i << " not written";
        worst =
            std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / std::sqrt(static_cast<double>(in_dim)));
      }
      EXPECT_LT(worst, 1e-4) << what;
    }
  }
  EXPECT_TRUE(absl::IsInvalidArgument(LaunchMatMulBf16({nullptr, nullptr, nullptr, 0, 1, 1}, stream_)));
  DeviceVector<uint16_t> dx{std::vector<uint16_t>(17 * 64)}, dw{std::vector<uint16_t>(64 * 64)};
  DeviceVector<float> dout{std::vector<float>(17 * 64)};
  for (auto [rows, in_dim, out_dim] : {std::tuple{17, 64, 64}, {4, 48, 64}, {4, 64, 40}}) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        LaunchMatMulBf16({dx.get(), dw.get(), dout.get(), rows, in_dim, out_dim, MatMulPath::kSkinny}, stream_)))
        << rows << "x" << in_dim << "x" << out_dim << " forced onto the skinny kernel";
  }
}

// The skinny kernel gives a row the same bits whatever rides with it and wherever it sits:
// a decode step's logits do not depend on the batch.
TEST_F(CudaGemmTest, SkinnyMatMulRowsDoNotDependOnTheBatch) {
  const int in_dim = 4096, out_dim = 1024, rows = 13;
  std::mt19937 gen(5);
  std::vector<uint16_t> x(static_cast<size_t>(rows) * in_dim), w(static_cast<size_t>(out_dim) * in_dim);
  for (uint16_t& v : x) v = test_support::RandomBf16(gen);
  for (uint16_t& v : w) v = test_support::RandomBf16(gen);
  DeviceVector<uint16_t> dw(w);
  auto product = [&](const std::vector<uint16_t>& xs, int n) {
    DeviceVector<uint16_t> dx(xs);
    DeviceVector<float> out{std::vector<float>(static_cast<size_t>(n) * out_dim)};
    EXPECT_TRUE(LaunchMatMulBf16({dx.get(), dw.get(), out.get(), n, in_dim, out_dim, MatMulPath::kSkinny}, stream_).ok());
    Sync();
    return out.ToHost();
  };
  const std::vector<float> batch = product(x, rows);
  auto row_of = [&](int r) { return std::vector<uint16_t>(x.begin() + int64_t{r} * in_dim, x.begin() + (r + 1) * in_dim); };
  for (int r : {0, 7, 8, 12}) {
    // Alone, and as the last row of a batch of 16 whose other rows are row 0.
    std::vector<uint16_t> moved;
    for (int i = 0; i < 15; ++i) moved.insert(moved.end(), x.begin(), x.begin() + in_dim);
    const std::vector<uint16_t> mine = row_of(r);
    moved.insert(moved.end(), mine.begin(), mine.end());
    const std::vector<float> alone = product(mine, 1), last = product(moved, 16);
    EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + int64_t{r} * out_dim, out_dim * sizeof(float)))
        << "row " << r << " alone differs from the same row in a batch of " << rows;
    EXPECT_EQ(0, std::memcmp(last.data() + int64_t{15} * out_dim, batch.data() + int64_t{r} * out_dim,
                             out_dim * sizeof(float)))
        << "row " << r << " as row 15 of 16 differs from it as row " << r << " of " << rows;
  }
}

// A tuned cuBLAS product (a decode step's, kernels/gemm/cublas.h) equals the CPU twin, gives
// the same bits every call, is recorded with what it chose, and is not tuned inside a
// graph capture (timing would break the capture): the captured call runs the default.
TEST_F(CudaGemmTest, TunedMatMulMatchesCpuAndRepeatsItsBits) {
  for (auto [rows, in_dim, out_dim] : {std::tuple{32, 1024, 8192}, {64, 4096, 2048}, {17, 512, 1536}}) {
    const std::string what = std::to_string(rows) + "x" + std::to_string(in_dim) + "x" + std::to_string(out_dim);
    const RandomProduct product(rows, in_dim, out_dim, rows * 31 + out_dim);
    const std::vector<float>& want = product.want;
    DeviceVector<uint16_t> dx(product.x), dw(product.w);
    auto run = [&](bool capture) {
      DeviceVector<float> out{std::vector<float>(want.size(), std::nanf(""))};
      MatMulBf16Params p{dx.get(), dw.get(), out.get(), rows, in_dim, out_dim, MatMulPath::kCublas, true};
      if (capture) {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        EXPECT_TRUE(LaunchMatMulBf16(p, stream_).ok()) << what;
        EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess) << what;
        EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess) << what;
        EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess) << what;
        Sync();
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      } else {
        EXPECT_TRUE(LaunchMatMulBf16(p, stream_).ok()) << what;
        Sync();
      }
      return out.ToHost();
    };
    auto tuned = [&] {
      for (const MatMulTuning& t : TunedMatMuls()) {
        if (t.rows == rows && t.in_dim == in_dim && t.out_dim == out_dim) return true;
      }
      return false;
    };
    if (rows == 32) {
      // A thread's first cuBLAS product makes its handle, which cannot happen under capture:
      // refused with a clear status, the capture left valid; then one product outside.
      cudaStream_t other = nullptr;
      ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
      std::thread([&] {
        cudaGraph_t graph = nullptr;
        DeviceVector<float> out{std::vector<float>(want.size())};
        EXPECT_EQ(cudaStreamBeginCapture(other, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        EXPECT_TRUE(absl::IsFailedPrecondition(LaunchMatMulBf16(
            {dx.get(), dw.get(), out.get(), rows, in_dim, out_dim, MatMulPath::kCublas, true}, other)));
        EXPECT_EQ(cudaStreamEndCapture(other, &graph), cudaSuccess);
        if (graph != nullptr) cudaGraphDestroy(graph);
      }).join();
      cudaStreamDestroy(other);
    }
    // This thread's handle, made outside a capture (the engine's first step of a shape is eager).
    {
      DeviceVector<float> out{std::vector<float>(want.size())};
      ASSERT_TRUE(LaunchMatMulBf16({dx.get(), dw.get(), out.get(), rows, in_dim, out_dim, MatMulPath::kCublas}, stream_).ok());
      Sync();
    }
    const std::vector<float> captured = run(true);
    EXPECT_FALSE(tuned()) << what << " was tuned inside a capture";
    const std::vector<float> first = run(false), second = run(false);
    ASSERT_TRUE(tuned()) << what;
    double worst = 0;
    for (size_t i = 0; i < first.size(); ++i) {
      ASSERT_FALSE(std::isnan(first[i])) << what << " element " << i << " not written";
      ASSERT_FALSE(std::isnan(captured[i])) << what << " element " << i << " not written under capture";
      worst = std::max(worst, std::fabs(static_cast<double>(first[i]) - want[i]) / std::sqrt(static_cast<double>(in_dim)));
    }
    EXPECT_LT(worst, 1e-4) << what;
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0) << what << ": not the same bits";
    for (const MatMulTuning& t : TunedMatMuls()) {
      if (t.rows != rows || t.in_dim != in_dim || t.out_dim != out_dim) continue;
      EXPECT_GT(t.default_us, 0) << what;
      EXPECT_LE(t.chosen_us, t.default_us) << what;
      EXPECT_EQ(t.cublaslt, t.chosen_us < t.default_us) << what;
      std::printf("tuned %s: default %.1f us, %s %.1f us, %d candidates\n", what.c_str(), t.default_us,
                  t.cublaslt ? "cublasLt" : "default", t.chosen_us, t.candidates);
    }
  }
}

}  // namespace
}  // namespace strata::kernels
