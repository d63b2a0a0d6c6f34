// kernels/gemm: linear layers on the GPU, bf16 operands, fp32 accumulation: through cuBLAS
// (loaded with dlopen at the first product; cublas.cc says why), or, for the few rows of a
// decode step, through strata's skinny kernel (skinny.cu), which reads the weights faster.
// The CPU specification is MatMulWT (gemm_cpu.h); the bf16 twin tests use is
// kernels/testing/gemm_cpu.h.
#ifndef STRATA_KERNELS_GEMM_GEMM_H_
#define STRATA_KERNELS_GEMM_GEMM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/stream.h"

namespace strata::kernels {

// out[r][o] = sum_i x[r][i] * w[o][i] for x [rows][in_dim] and w [out_dim][in_dim] (HF
// Linear layout) in bf16 (uint16_t), out fp32 [rows][out_dim]: the device twin of MatMulWT
// on the widened operands. Every product of two bf16 values is exact in fp32; only the
// summation order differs from the CPU.
// Which kernel runs a product: kAuto takes the skinny kernel for 1..16 rows where the
// shape fits it (in_dim a multiple of 32, out_dim of 16, x and w 16-byte aligned), else
// cuBLAS; the others force one (tests and benchmarks).
enum class MatMulPath { kAuto, kCublas, kSkinny };
// The most rows kAuto gives the skinny kernel.
inline constexpr int kSkinnyMatMulMaxRows = 16;

struct MatMulBf16Params {
  const uint16_t* x;
  const uint16_t* w;
  float* out;
  int rows, in_dim, out_dim;
  MatMulPath path = MatMulPath::kAuto;
  // For a product cuBLAS runs: time cublasGemmEx's default against cublasLt's candidates the
  // first time this shape runs outside a graph capture (the stream waits for it: about a
  // millisecond, once per shape and process) and keep the fastest (decode steps ask; see
  // kernels/gemm/cublas.h). Without it, or for a shape not yet tuned, cuBLAS's default.
  bool tune = false;
};

// What tuning chose for a shape (device, rows, in_dim, out_dim): cublasLt (or the default),
// the default's median time and the kept choice's, of `candidates` cublasLt algorithms.
struct MatMulTuning {
  int device, rows, in_dim, out_dim;
  bool cublaslt;
  double default_us, chosen_us;
  int candidates;
};

// Every shape tuned so far in this process (for benchmarks and logs); empty without cuBLAS.
// Thread-safe.
std::vector<MatMulTuning> TunedMatMuls();

// Enqueues on `stream` (cuBLAS with this thread's handle, created on first use); pointers
// are device pointers the caller owns. The skinny kernel's result for a row does not
// depend on the other rows. InvalidArgument for non-positive sizes, or kSkinny for a shape
// it does not take; FailedPrecondition when cuBLAS cannot be loaded; InternalError naming
// the cuBLAS status when the call fails; Unimplemented when strata was built without
// CUDA, or without cuBLAS for a product that needs it.
absl::Status LaunchMatMulBf16(const MatMulBf16Params& p, cudaStream_t stream);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_GEMM_GEMM_H_
