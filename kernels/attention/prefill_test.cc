// The tensor-core prefill attention against its CPU specification (PagedPrefillAttention),
// on random inputs over a grid of shapes: head_dim 64/80/96/128/256, 1 to 16 query heads per
// KV head, page sizes 16/32/64, sequences with cached history and new rows, one-row sequences and
// sequences with no new rows. Each case runs through the entry point and through every
// query-tile form of the kernel (prefill_launch.h); cases of one new row per sequence also
// run as decodes, on CUDA cores and on tensor cores (decode.h's DecodeKernel).
//
// Tolerances (bf16 operands: Q and P are rounded to bf16 on the device, sums in fp32):
//   out: ||got - want|| / ||want|| <= 1e-2 over the call, and <= 2e-2 for each (row, head);
//   lse: |got - want| <= 2 * shift + 1e-4, where shift = 2^-9 * scale * max over the row's
//        visible keys of sum_i |q_i k_i| bounds how far rounding q to bf16 moves any score
//        (lse moves by at most the largest score shift; the softmax sum stays fp32).
// Outputs are poisoned with NaN before each run, so an unwritten element fails.
#include "kernels/attention/prefill.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/attention/decode.h"
#include "kernels/attention/prefill_launch.h"
#include "kernels/attention/attention_cpu.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/elementwise/elementwise_cpu.h"
#include "kernels/gemm/gemm_cpu.h"
#include "kernels/norm/norm_cpu.h"
#include "kernels/rope/rope_cpu.h"
#include "kernels/sampling/sampling_cpu.h"
#include "kernels/testing/attention_compare.h"
#include "kernels/testing/attention_cpu.h"
#include "kernels/testing/elementwise_cpu.h"
#include "kernels/testing/gemm_cpu.h"
#include "kernels/testing/norm_cpu.h"
#include "kernels/testing/rope_cpu.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/paged_pool.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;

std::vector<float> RandomVector(size_t n, uint32_t seed, float lo, float hi) {
  return test_support::RandomFloats(n, seed, lo, hi);
}

constexpr double kOutTolerance = 1e-2;     // relative to the norm of the whole output
constexpr double kOutRowTolerance = 2e-2;  // relative to the norm of one (row, head)

struct DevicePool {
  explicit DevicePool(const test_support::PagedPool& p)
      : k(p.k), v(p.v), indptr(p.indptr), indices(p.indices), last(p.last_page_len) {
    view = PagedKv{k.get(), v.get(), p.page_size, p.kv_heads, p.head_dim, indptr.get(), indices.get(), last.get()};
  }
  DeviceVector<uint16_t> k, v;
  DeviceVector<int32_t> indptr, indices, last;
  PagedKv view;
};

// One call's shape: each sequence's total length and how many of its last tokens are new.
struct Case {
  std::vector<int64_t> lengths;
  std::vector<int32_t> new_tokens;
  int kv_heads, group, head_dim, page_size;
  float q_range;  // q uniform in [-q_range, q_range]; larger is a sharper softmax
};

std::string Describe(const Case& c) {
  std::string s = "head_dim " + std::to_string(c.head_dim) + " group " + std::to_string(c.group) + " kv_heads " +
                  std::to_string(c.kv_heads) + " page " + std::to_string(c.page_size) + " q_range " +
                  std::to_string(c.q_range) + " (length/new:";
  for (size_t i = 0; i < c.lengths.size(); ++i) {
    s += " " + std::to_string(c.lengths[i]) + "/" + std::to_string(c.new_tokens[i]);
  }
  return s + ")";
}

class CudaPrefillAttentionTest : public test_support::GpuTest {
 protected:

  // Runs the case on the device and the CPU twin and compares them; returns the parts the
  // entry point splits the keys into when given a workspace (each run and compared too).
  int Check(const Case& c, uint32_t seed) {
    int splits = 1;
    const std::string what = Describe(c);
    const int batch = static_cast<int>(c.lengths.size());
    const int heads = c.kv_heads * c.group, d = c.head_dim;
    std::vector<int32_t> qo_indptr{0};
    int max_new = 0;
    for (int32_t n : c.new_tokens) {
      qo_indptr.push_back(qo_indptr.back() + n);
      max_new = std::max(max_new, n);
    }
    const int rows = qo_indptr.back();
    const test_support::PagedPool pool =
        test_support::RandomPagedPool(c.lengths, c.page_size, c.kv_heads, d, seed);
    const std::vector<float> q =
        RandomVector(static_cast<size_t>(rows) * heads * d, seed + 1, -c.q_range, c.q_range);
    std::vector<float> want(q.size()), want_lse(static_cast<size_t>(rows) * heads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    PagedPrefillAttention(q.data(), pool.View(), qo_indptr.data(), batch, heads, scale, want.data(),
                          want_lse.data());
    const std::vector<double> lse_tol = LseTolerances(pool, q, qo_indptr, c, scale);

    DevicePool dp(pool);
    DeviceVector<int32_t> dqo(qo_indptr);
    DeviceVector<float> dq(q);
    // Each form (launched on params that write to fresh, poisoned outputs) against the CPU twin.
    using Launch = std::function<cudaError_t(const internal::PrefillTcParams&)>;
    auto check_form = [&](const std::string& form, const Launch& launch) {
      DeviceVector<float> dout{std::vector<float>(q.size(), std::nanf(""))},
          dlse{std::vector<float>(want_lse.size(), std::nanf(""))};
      const internal::PrefillTcParams p{dq.get(), dp.view.k_pages, dp.view.v_pages, dp.view.indptr,
                                        dp.view.indices, dp.view.last_page_len, dqo.get(), c.page_size,
                                        c.kv_heads, d, heads, batch, max_new, scale, dout.get(), dlse.get()};
      EXPECT_EQ(launch(p), cudaSuccess) << form;
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << form;
      Compare(dout.ToHost(), dlse.ToHost(), want, want_lse, lse_tol, rows, heads, d, form);
    };
    check_form(what + " tiles kAuto", [&](const internal::PrefillTcParams& p) {  // the entry point's own choice
      const absl::Status s = LaunchPagedPrefillAttentionTc(
          {dq.get(), dp.view, dqo.get(), batch, rows, heads, scale, max_new, p.out, p.lse}, stream_);
      EXPECT_TRUE(s.ok()) << s;
      return s.ok() ? cudaSuccess : cudaErrorUnknown;
    });
    using Tiles = internal::PrefillTcTiles;
    for (Tiles tiles : {Tiles::k64Rows4Warps, Tiles::k128Rows8Warps, Tiles::k128Rows4Warps,
                        Tiles::k128Rows4Warps64Keys, Tiles::k16Rows1Warp}) {
      check_form(what + " tiles " + std::to_string(static_cast<int>(tiles)), [&](const internal::PrefillTcParams& p) {
        return internal::PagedPrefillAttentionTcAsync(p, tiles, stream_);
      });
    }
    // The Hopper form (wgmma, warp-specialised), where the device has it.
    if (internal::PrefillWgmmaSupported(d)) {
      check_form(what + " wgmma warp-specialised", [&](const internal::PrefillTcParams& p) {
        return internal::PagedPrefillAttentionWgmmaWsAsync(p, stream_);
      });
    }
    // Split along the keys, as the engine launches it (a workspace and its longest sequence).
    const PrefillSplitShape shape{batch, rows, max_new, heads, c.kv_heads, d,
                                  *std::max_element(c.lengths.begin(), c.lengths.end())};
    splits = PrefillKeySplits(shape);
    if (splits > 1) {
      const std::string form = what + " split in " + std::to_string(splits);
      DeviceVector<float> ws{std::vector<float>(static_cast<size_t>(PrefillAttentionWorkspaceFloats(shape)),
                                                std::nanf(""))};
      DeviceVector<float> dout{std::vector<float>(q.size(), std::nanf(""))},
          dlse{std::vector<float>(want_lse.size(), std::nanf(""))};
      PrefillAttentionTcParams p{dq.get(), dp.view, dqo.get(), batch,      rows,
                                 heads,    scale,   max_new,   dout.get(), dlse.get()};
      p.workspace = ws.get();
      p.max_keys = shape.max_keys;
      const absl::Status s = LaunchPagedPrefillAttentionTc(p, stream_);
      EXPECT_TRUE(s.ok()) << form << ": " << s;
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << form;
      Compare(dout.ToHost(), dlse.ToHost(), want, want_lse, lse_tol, rows, heads, d, form);
    }
    // One new row per sequence is a decode: both decode kernels, to the same tolerances.
    if (std::all_of(c.new_tokens.begin(), c.new_tokens.end(), [](int32_t n) { return n == 1; })) {
      int64_t max_tokens = 0;
      for (int64_t n : c.lengths) max_tokens = std::max(max_tokens, n);
      DeviceVector<float> ws{std::vector<float>(static_cast<size_t>(DecodeWorkspaceFloats(batch, heads, d, max_tokens)))};
      int64_t total_tokens = 0;
      for (int64_t n : c.lengths) total_tokens += n;
      // Each kernel with the rows taken as max_tokens long, and split by their mean length
      // (more parts where the rows differ: DecodeAttentionParams::typical_tokens).
      for (int64_t typical : {int64_t{0}, (total_tokens + batch - 1) / batch}) {
        for (DecodeKernel kernel : {DecodeKernel::kAuto, DecodeKernel::kCudaCores, DecodeKernel::kTensorCores}) {
          const std::string form = what + " decode kernel " + std::to_string(static_cast<int>(kernel)) +
                                   " typical " + std::to_string(typical);
          DeviceVector<float> dout{std::vector<float>(q.size(), std::nanf(""))},
              dlse{std::vector<float>(want_lse.size(), std::nanf(""))};
          DecodeAttentionParams dp_params{dq.get(), dp.view, batch,      heads,      scale,
                                          max_tokens, ws.get(), dout.get(), dlse.get(), kernel};
          dp_params.typical_tokens = typical;
          const absl::Status s = LaunchPagedDecodeAttention(dp_params, stream_);
          EXPECT_TRUE(s.ok()) << form << ": " << s;
          EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << form;
          Compare(dout.ToHost(), dlse.ToHost(), want, want_lse, lse_tol, rows, heads, d, form);
        }
      }
      // The tensor-core decode in blocks of two and of four warps that split a part's keys
      // (every launch, one part and several) and in one-warp blocks alone: the same
      // tolerances.
      for (KeyWarps mode : {KeyWarps::kAlways, KeyWarps::kFour, KeyWarps::kNever}) {
        for (int parts : {0, 1, 3}) {
          SetTensorCoreDecodeKeyWarpsForTesting(mode);
          SetTensorCoreDecodePartsForBenchmarks(parts);
          const std::string form = what +
                                   (mode == KeyWarps::kAlways ? " two-warp"
                                    : mode == KeyWarps::kFour ? " four-warp"
                                                              : " one-warp") +
                                   " decode, parts " + std::to_string(parts);
          DeviceVector<float> dout{std::vector<float>(q.size(), std::nanf(""))},
              dlse{std::vector<float>(want_lse.size(), std::nanf(""))};
          const absl::Status s = LaunchPagedDecodeAttention({dq.get(), dp.view, batch, heads, scale, max_tokens, ws.get(),
                                                             dout.get(), dlse.get(), DecodeKernel::kTensorCores},
                                                            stream_);
          EXPECT_TRUE(s.ok()) << form << ": " << s;
          EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << form;
          Compare(dout.ToHost(), dlse.ToHost(), want, want_lse, lse_tol, rows, heads, d, form);
        }
      }
      SetTensorCoreDecodeKeyWarpsForTesting(KeyWarps::kAuto);
      SetTensorCoreDecodePartsForBenchmarks(0);
    }
    return splits;
  }

  // Per (row, head): 2 * 2^-9 * scale * max_t sum_i |q_i k_ti| + 1e-4 (see the top).
  static std::vector<double> LseTolerances(const test_support::PagedPool& pool, const std::vector<float>& q,
                                           const std::vector<int32_t>& qo_indptr, const Case& c, float scale) {
    const int heads = c.kv_heads * c.group, d = c.head_dim;
    std::vector<double> tol(static_cast<size_t>(qo_indptr.back()) * heads);
    for (size_t b = 0; b < c.lengths.size(); ++b) {
      const int64_t first_pos = c.lengths[b] - c.new_tokens[b];
      for (int j = 0; j < c.new_tokens[b]; ++j) {
        const int64_t r = qo_indptr[b] + j;
        for (int h = 0; h < heads; ++h) {
          const float* qh = q.data() + (r * heads + h) * d;
          double worst = 0;
          for (int64_t t = 0; t <= first_pos + j; ++t) {
            const int64_t page = pool.indices[pool.indptr[b] + t / c.page_size];
            const uint16_t* k = pool.k.data() + ((page * c.page_size + t % c.page_size) * c.kv_heads +
                                                 h / c.group) * d;
            double sum = 0;
            for (int i = 0; i < d; ++i) sum += std::abs(qh[i] * static_cast<double>(Bf16ToFloat(k[i])));
            worst = std::max(worst, sum);
          }
          tol[r * heads + h] = 2 * std::ldexp(1.0, -9) * scale * worst + 1e-4;
        }
      }
    }
    return tol;
  }

  static void Compare(const std::vector<float>& got, const std::vector<float>& got_lse,
                      const std::vector<float>& want, const std::vector<float>& want_lse,
                      const std::vector<double>& lse_tol, int rows, int heads, int d, const std::string& what) {
    test_support::ExpectAttentionNear(got, want, rows, heads, d, what, kOutTolerance, kOutRowTolerance);
    int reported = 0;
    for (int r = 0; r < rows * heads; ++r) {
      if (!(std::abs(got_lse[r] - want_lse[r]) <= lse_tol[r]) && reported++ < 5) {
        ADD_FAILURE() << what << ": row " << r / heads << " head " << r % heads << " lse " << got_lse[r]
                      << " on the GPU, " << want_lse[r] << " on the CPU (tolerance " << lse_tol[r] << ")";
      }
    }
  }
};

TEST_F(CudaPrefillAttentionTest, CachedHistoryPlusNewRowsMatchesCpu) {
  uint32_t seed = 1;
  for (int head_dim : {64, 80, 96, 128, 256}) {
    for (int group : {1, 3, 4, 5, 6, 7, 8, 10, 13, 16}) {  // past 8: subgroups
      // Whole prompts, history + new rows crossing tile boundaries, and one-row sequences.
      Case c{{300, 1000, 77, 1, 513}, {300, 40, 77, 1, 1}, 2, group, head_dim, 16, 1.0f};
      Check(c, seed++);
    }
  }
}

TEST_F(CudaPrefillAttentionTest, GroupOfTwoAndLargerPagesMatchCpu) {
  // 24: a page size no power of two (the kernel divides where it cannot shift).
  uint32_t seed = 100;
  for (int page_size : {32, 64, 24}) {
    for (int head_dim : {64, 80, 96, 128, 256}) {
      Case c{{129, 700, 64}, {129, 190, 63}, 3, 2, head_dim, page_size, 1.0f};
      Check(c, seed++);
    }
  }
}

TEST_F(CudaPrefillAttentionTest, OneRowSequencesMatchCpu) {
  // Decode-like: every sequence has one new row (query tile mostly padding).
  uint32_t seed = 200;
  for (int group : {1, 8}) {
    Case c{{1, 2, 64, 65, 300, 1025}, {1, 1, 1, 1, 1, 1}, 2, group, 128, 16, 1.0f};
    Check(c, seed++);
  }
}

TEST_F(CudaPrefillAttentionTest, DecodeOnTensorCoresMatchesCpu) {
  // Decode rows over every head dim and GQA group (subgroups past 8), parts of one 32-key
  // tile to whole sequences, pages of 16, 64 and 24 tokens.
  uint32_t seed = 500;
  for (int head_dim : {64, 80, 96, 128, 256}) {
    for (int group : {1, 4, 5, 7, 8, 12, 16}) {
      for (int page_size : {16, 64, 24}) {
        Case c{{1, 31, 32, 33, 1000, 4100}, {1, 1, 1, 1, 1, 1}, 2, group, head_dim, page_size, 1.0f};
        Check(c, seed++);
      }
    }
  }
  Case sharp{{700, 5, 2048}, {1, 1, 1}, 4, 7, 128, 16, 4.0f};
  Check(sharp, seed++);
}

TEST_F(CudaPrefillAttentionTest, SharpSoftmaxAndEmptySequencesMatchCpu) {
  // Larger scores exercise the running-max rescale; sequences with no new rows are skipped.
  Case c{{500, 33, 900}, {500, 0, 450}, 2, 4, 128, 16, 4.0f};
  Check(c, 300);
  Case d{{257, 40}, {0, 40}, 1, 4, 64, 16, 4.0f};
  Check(d, 301);
}

TEST_F(CudaPrefillAttentionTest, LongPromptLlamaShapesMatchCpu) {
  // Llama-3-8B's attention shape (8 KV heads of 128, 4 query heads each) on a long prompt.
  Case c{{1100}, {1100}, 8, 4, 128, 16, 1.0f};
  Check(c, 400);
}

TEST_F(CudaPrefillAttentionTest, ReturningTurnsSplitTheirKeysAndMatchCpu) {
  // A returning turn: a few new rows over a long history, too few query tiles to fill the
  // SMs, so the keys are split and the parts merged. Every head dim, groups with and
  // without subgroups, a second sequence shorter than a part, new rows crossing tile
  // boundaries, a sharp softmax; and Llama-3-8B's shape at 16K.
  uint32_t seed = 600;
  for (int head_dim : {64, 80, 96, 128, 256}) {
    for (int group : {1, 4, 7, 16}) {
      Case c{{4100, 900}, {33, 17}, 2, group, head_dim, 16, 1.0f};
      EXPECT_GT(Check(c, seed++), 1) << Describe(c);
    }
  }
  Case sharp{{6000, 3000, 1}, {80, 1, 1}, 2, 4, 128, 32, 4.0f};
  EXPECT_GT(Check(sharp, seed++), 1);
  Case llama{{16464}, {80}, 8, 4, 128, 16, 1.0f};
  EXPECT_GT(Check(llama, seed++), 1);
}

TEST_F(CudaPrefillAttentionTest, RejectsShapesItDoesNotTake) {
  test_support::PagedPool odd = test_support::RandomPagedPool({4}, 16, 1, 48, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(
      LaunchPagedPrefillAttentionTc({nullptr, odd.View(), nullptr, 1, 4, 1, 1.0f, 4, nullptr, nullptr}, stream_)));
  test_support::PagedPool pool = test_support::RandomPagedPool({4}, 16, 2, 64, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(  // 3 query heads over 2 KV heads
      LaunchPagedPrefillAttentionTc({nullptr, pool.View(), nullptr, 1, 4, 3, 1.0f, 4, nullptr, nullptr}, stream_)));
  EXPECT_TRUE(absl::IsInvalidArgument(  // 65 per KV head: past kMaxGqaGroupSize
      LaunchPagedPrefillAttentionTc({nullptr, pool.View(), nullptr, 1, 4, 130, 1.0f, 4, nullptr, nullptr}, stream_)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      LaunchPagedPrefillAttentionTc({nullptr, pool.View(), nullptr, -1, 4, 2, 1.0f, 4, nullptr, nullptr}, stream_)));
  EXPECT_TRUE(LaunchPagedPrefillAttentionTc({nullptr, pool.View(), nullptr, 0, 0, 2, 1.0f, 0, nullptr, nullptr}, stream_)
                  .ok())
      << "an empty batch is an empty launch";
}

}  // namespace
}  // namespace strata::kernels
