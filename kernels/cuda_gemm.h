// Linear layers on the GPU through cuBLAS: bf16 operands, fp32 accumulation.
//
// MatMulBf16: out[r][o] = sum_i x[r][i] * w[o][i] (+ bias[o]) for x [rows][in_dim] and w
// [out_dim][in_dim] (HF Linear layout) in bf16 (uint16_t), out fp32 [rows][out_dim]: the
// device twin of MatMulWT on the widened operands. Every product of two bf16 values is
// exact in fp32; only the summation order differs from the CPU.
//
// Enqueues on `stream` with this thread's cuBLAS handle (created on first use); pointers
// are device pointers. InvalidArgument for non-positive sizes; InternalError naming the
// cuBLAS status when the call fails; Unimplemented when strata was built without cuBLAS.
#ifndef STRATA_KERNELS_CUDA_GEMM_H_
#define STRATA_KERNELS_CUDA_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda_kernels.h"

namespace strata::kernels {

absl::Status LaunchMatMulBf16(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim,
                              cudaStream_t stream);

// The CPU twin: widens x and w to fp32 and calls MatMulWT (no bias).
void MatMulBf16(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_CUDA_GEMM_H_
