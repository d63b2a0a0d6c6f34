// cuBLAS for gemm.cc's products: loaded with dlopen at the first product (cublas.cc says
// why), and, for the shapes a caller asks to tune, the fastest of cublasGemmEx's default
// and cublasLt's heuristic candidates, timed once per shape (PyTorch's TunableOp does the
// same for its GEMMs). Internal to kernels/gemm.
#ifndef STRATA_KERNELS_GEMM_CUBLAS_H_
#define STRATA_KERNELS_GEMM_CUBLAS_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/gemm/gemm.h"

namespace strata::kernels::internal {

// out = x w^T (gemm.h's product) through cuBLAS on `stream`. With p.tune, the first call of
// a (device, rows, in_dim, out_dim) shape that is not being captured into a graph waits for
// the stream, times cublasGemmEx's default and cublasLt's candidates (no workspace, no
// split-K reduction, so every candidate is deterministic) on the caller's operands, and
// keeps the fastest where it beats the default by more than kMatMulTuneMargin; that call,
// and every later one of the shape with p.tune (captured or not), runs the kept choice. A
// shape seen first under capture runs the default and is tuned at its next eager call.
// Without p.tune, the default.
// Errors: FailedPrecondition when cuBLAS cannot be loaded, Internal naming the cuBLAS
// status or the CUDA error. Thread-safe (each thread has its own handles).
absl::Status CublasMatMulBf16(const MatMulBf16Params& p, cudaStream_t stream);

constexpr double kMatMulTuneMargin = 0.02;

}  // namespace strata::kernels::internal

#endif  // STRATA_KERNELS_GEMM_CUBLAS_H_
