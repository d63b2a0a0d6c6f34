// kernels/gemm: linear layers on the GPU through cuBLAS (loaded with dlopen at the first
// product; gemm.cc says why), bf16 operands, fp32 accumulation. The CPU specification is
// MatMulWT (gemm_cpu.h); the bf16 twin tests use is kernels/testing/gemm_cpu.h.
#ifndef STRATA_KERNELS_GEMM_GEMM_H_
#define STRATA_KERNELS_GEMM_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/stream.h"

namespace strata::kernels {

// out[r][o] = sum_i x[r][i] * w[o][i] for x [rows][in_dim] and w [out_dim][in_dim] (HF
// Linear layout) in bf16 (uint16_t), out fp32 [rows][out_dim]: the device twin of MatMulWT
// on the widened operands. Every product of two bf16 values is exact in fp32; only the
// summation order differs from the CPU.
struct MatMulBf16Params {
  const uint16_t* x;
  const uint16_t* w;
  float* out;
  int rows, in_dim, out_dim;
};

// Enqueues on `stream` with this thread's cuBLAS handle (created on first use); pointers
// are device pointers the caller owns. InvalidArgument for non-positive sizes;
// FailedPrecondition when cuBLAS cannot be loaded; InternalError naming the cuBLAS status
// when the call fails; Unimplemented when strata was built without cuBLAS.
absl::Status LaunchMatMulBf16(const MatMulBf16Params& p, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_GEMM_GEMM_H_
