// The device merge of partial attentions (merge.cu) against the CPU merge (merge_cpu.h)
// applied part by part: few parts (the float4 merge loads them all at once) and many, head
// sizes on and off its float4 path, empty parts (lse -inf, their rows poisoned with NaN: never
// read into the answer), a part already in `out` (relay's context part) and bf16 output.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/merge_cpu.h"
#include "kernels/attention/merge_launch.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/testing/cuda_testing.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;

class CudaMergeTest : public test_support::GpuTest {};

struct Parts {
  std::vector<float> o, lse;  // [rows][splits][heads][head_dim], [rows][splits][heads]
};

// Random parts; part s of every (row, head) with (row + head + s) % 5 == 4 is empty: lse
// -inf and its output NaN. Lse values spread over +-8 (weights from 1 to e^-16).
Parts RandomParts(int rows, int splits, int heads, int head_dim, uint32_t seed) {
  Parts p;
  p.o = test_support::RandomFloats(static_cast<size_t>(rows) * splits * heads * head_dim, seed);
  p.lse = test_support::RandomFloats(static_cast<size_t>(rows) * splits * heads, seed + 1, -8.0f, 8.0f);
  for (int r = 0; r < rows; ++r) {
    for (int s = 0; s < splits; ++s) {
      for (int h = 0; h < heads; ++h) {
        if ((r + h + s) % 5 != 4) continue;
        const size_t at = (static_cast<size_t>(r) * splits + s) * heads + h;
        p.lse[at] = -INFINITY;
        for (int d = 0; d < head_dim; ++d) p.o[at * head_dim + d] = std::nanf("");
      }
    }
  }
  return p;
}

// The CPU merge, part by part, onto (o, lse) (which may hold a part already, or o = 0 and
// lse = -inf for none).
void CpuMerge(const Parts& parts, int rows, int splits, int heads, int head_dim, std::vector<float>& o,
              std::vector<float>& lse) {
  std::vector<float> part_o(static_cast<size_t>(heads) * head_dim), part_lse(static_cast<size_t>(heads));
  for (int r = 0; r < rows; ++r) {
    for (int s = 0; s < splits; ++s) {
      for (int h = 0; h < heads; ++h) {
        const size_t at = (static_cast<size_t>(r) * splits + s) * heads + h;
        part_lse[static_cast<size_t>(h)] = parts.lse[at];
        for (int d = 0; d < head_dim; ++d) {
          // An empty part's output is never used (its weight is 0): zero, not its NaN.
          part_o[static_cast<size_t>(h) * head_dim + d] = parts.lse[at] == -INFINITY ? 0.0f : parts.o[at * head_dim + d];
        }
      }
      float* row_o = o.data() + static_cast<size_t>(r) * heads * head_dim;
      float* row_lse = lse.data() + static_cast<size_t>(r) * heads;
      MergeAttentionStates(row_o, row_lse, part_o.data(), part_lse.data(), row_o, row_lse, 1, heads, head_dim);
    }
  }
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_empty = std::isinf(want[i]) && got[i] == want[i];
    if (!both_empty && !(std::abs(got[i] - want[i]) <= tolerance * std::max(1.0f, std::abs(want[i]))) &&
        reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " on the GPU, " << want[i] << " on the CPU";
    }
  }
}

TEST_F(CudaMergeTest, MatchesTheCpuMergePartByPart) {
  const int rows = 5, heads = 6;
  uint32_t seed = 1;
  for (int head_dim : {64, 128, 256}) {
    for (int splits : {1, 2, 3, 8, 9, 40}) {
      for (bool with_context : {false, true}) {
        const std::string what = "head_dim " + std::to_string(head_dim) + ", " + std::to_string(splits) +
                                 " parts" + (with_context ? ", a part in out" : "");
        const Parts parts = RandomParts(rows, splits, heads, head_dim, seed += 2);
        // The part already in out (relay's context part): random rows, some empty.
        std::vector<float> want_o(static_cast<size_t>(rows) * heads * head_dim, 0.0f);
        std::vector<float> want_lse(static_cast<size_t>(rows) * heads, -INFINITY);
        std::vector<float> context_lse = want_lse;
        if (with_context) {
          want_o = test_support::RandomFloats(want_o.size(), seed + 100);
          context_lse = test_support::RandomFloats(context_lse.size(), seed + 101, -8.0f, 8.0f);
          for (size_t i = 0; i < context_lse.size(); i += 7) {
            context_lse[i] = -INFINITY;
            for (int d = 0; d < head_dim; ++d) want_o[i * head_dim + static_cast<size_t>(d)] = 0.0f;
          }
          want_lse = context_lse;
        }
        const std::vector<float> out_on_entry = want_o;
        CpuMerge(parts, rows, splits, heads, head_dim, want_o, want_lse);

        DeviceVector<float> ws_o(parts.o), ws_lse(parts.lse), out(out_on_entry), d_context_lse(context_lse);
        DeviceVector<float> lse{std::vector<float>(want_lse.size(), std::nanf(""))};
        ASSERT_EQ(internal::MergeStatesAsync(ws_o.get(), ws_lse.get(), splits, rows, heads, head_dim, out.get(),
                                             lse.get(), stream_, with_context ? d_context_lse.get() : nullptr),
                  cudaSuccess)
            << what;
        Sync();
        ExpectNear(out.ToHost(), want_o, 1e-5, what + " out");
        ExpectNear(lse.ToHost(), want_lse, 1e-5, what + " lse");

        // Into bf16: ToBf16's rounding of the same rows (within one bf16 step of the CPU's).
        DeviceVector<float> out_again(out_on_entry);
        DeviceVector<uint16_t> out_bf16{std::vector<uint16_t>(want_o.size(), 0xffff)};
        ASSERT_EQ(internal::MergeStatesAsync(ws_o.get(), ws_lse.get(), splits, rows, heads, head_dim, out_again.get(),
                                             nullptr, stream_, with_context ? d_context_lse.get() : nullptr,
                                             out_bf16.get()),
                  cudaSuccess)
            << what;
        Sync();
        const std::vector<uint16_t> got_bf16 = out_bf16.ToHost();
        std::vector<float> widened(got_bf16.size());
        for (size_t i = 0; i < got_bf16.size(); ++i) widened[i] = Bf16ToFloat(got_bf16[i]);
        ExpectNear(widened, want_o, 1.0 / 128, what + " bf16 out");
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels
