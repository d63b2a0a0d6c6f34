// Built only without CUDA: the twins' entry points exist and say why they cannot run.
#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/norm/norm.h"
#include "kernels/rope/rope.h"

namespace strata::kernels {
namespace {

TEST(CudaKernelsStubTest, LaunchWithoutCudaIsUnimplemented) {
  EXPECT_EQ(LaunchRmsNorm({nullptr, nullptr, nullptr, 1, 1, 1e-5f}, nullptr).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(LaunchSwiGlu({nullptr, nullptr, nullptr, 1}, nullptr).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(LaunchEmbed({nullptr, nullptr, 1, 1, nullptr}, nullptr).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(LaunchApplyRope({nullptr, nullptr, 1, 1, 2, nullptr}, nullptr).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace strata::kernels
