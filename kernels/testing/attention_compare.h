// How the attention kernels' tests compare a device output with its reference: bf16-operand
// accuracy, ||got - want|| / ||want|| <= overall over the call and <= per_row for each
// (row, head); a NaN (an element the kernel did not write: outputs are poisoned first)
// fails at once. GoogleTest assertions; header-only, for tests.
#ifndef STRATA_KERNELS_TESTING_ATTENTION_COMPARE_H_
#define STRATA_KERNELS_TESTING_ATTENTION_COMPARE_H_

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::kernels::test_support {

inline void ExpectAttentionNear(const std::vector<float>& got, const std::vector<float>& want, int rows, int heads,
                                int head_dim, const std::string& what, double overall = 1e-2, double per_row = 2e-2) {
  double err2 = 0, ref2 = 0;
  int reported = 0;
  for (int r = 0; r < rows * heads; ++r) {
    double row_err2 = 0, row_ref2 = 0;
    for (int i = 0; i < head_dim; ++i) {
      const double g = got[static_cast<size_t>(r) * head_dim + i], w = want[static_cast<size_t>(r) * head_dim + i];
      ASSERT_FALSE(std::isnan(g)) << what << ": row " << r / heads << " head " << r % heads << " dim " << i
                                  << " not written";
      row_err2 += (g - w) * (g - w);
      row_ref2 += w * w;
    }
    err2 += row_err2;
    ref2 += row_ref2;
    const double row_rel = std::sqrt(row_err2 / std::max(row_ref2, 1e-30));
    if (row_rel > per_row && reported++ < 5) {
      ADD_FAILURE() << what << ": row " << r / heads << " head " << r % heads << " relative error " << row_rel;
    }
  }
  EXPECT_LE(std::sqrt(err2 / std::max(ref2, 1e-30)), overall) << what;
}

}  // namespace strata::kernels::test_support

#endif  // STRATA_KERNELS_TESTING_ATTENTION_COMPARE_H_
