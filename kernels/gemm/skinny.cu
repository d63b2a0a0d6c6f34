// The skinny product on tensor cores: a decode step's linear layers, where a few rows (one
// a sequence) meet a weight matrix that is read once, so the product is a read of the
// weights and runs at whatever rate they stream in. cuBLAS reads the small decode layers
// (q/k/v, o) at about half the copy rate (docs/BENCHMARKS.md, "Linear layers"); this kernel
// keeps many loads in flight in every warp and splits K among a block's warps.
//
// Layout: a block takes 16 rows of w (outputs) and all rows of x; its warps each take a
// contiguous run of 32-wide K chunks. Per chunk a lane loads 16 bytes of two w rows (g and
// g + 8, g = lane / 4) and 16 bytes of x row g (and g + 8), and the warp runs two
// m16n8k16 MMAs per 8 rows of x: w is the A operand (16 outputs x 16 k), x the B operand
// (16 k x 8 rows). The 8 elements a lane loads, [8c, 8c + 8) with c = lane % 4, are the k
// slots {2c, 2c + 1, 2c + 8, 2c + 9} of the first MMA and the same of the second: a
// permutation of k applied to both operands alike, which the sum does not see. The warps'
// partial sums meet in shared memory and are added in warp order, so a row's result does
// not depend on the other rows or their count.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/gemm/skinny_launch.h"

namespace strata::kernels::internal {
namespace {

// 4 warps a block, each streaming its K range through a two-stage register pipeline: the
// next stage's loads are issued before the current stage's MMAs, so a warp always has a
// stage in flight (without it the warps stall on each load's latency and the weights
// stream in at ~0.5-0.65 of the copy rate; with it 0.6-0.95, measured on the H100 for
// Llama-3-8B's layers, docs/BENCHMARKS.md).
constexpr int kWarps = 4;

// Weights are read once: not kept in L1.
__device__ __forceinline__ uint4 LoadOnce(const uint16_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// d += a (16 x 16, row) * b (16 x 8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// kUnroll 32-wide K chunks: a[u][h] holds w row g + 8h's 8 elements of chunk u, b[u][n] x
// row g + 8n's. A chunk past the warp's range is zeros (its MMAs add nothing).
template <int kN, int kUnroll>
struct Stage {
  uint4 a[kUnroll][2];
  uint4 b[kUnroll][kN];
};

// kN 8-row fragments of x (rows <= 8 kN); kUnroll chunks a pipeline stage.
template <int kN, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32) SkinnyMatMulKernel(const uint16_t* __restrict__ x,
                                                                  const uint16_t* __restrict__ w,
                                                                  float* __restrict__ out, int rows, int in_dim,
                                                                  int out_dim) {
  constexpr int kSlots = kN * 4;  // accumulators a lane holds
  __shared__ float partial[kWarps][kSlots][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int chunks = in_dim / 32, per = (chunks + kWarps - 1) / kWarps;
  const int begin = min(chunks, warp * per), end = min(chunks, begin + per);
  const int o0 = blockIdx.x * 16;
  const uint16_t* w0 = w + int64_t{o0 + g} * in_dim + 8 * c;
  const uint16_t* w1 = w0 + int64_t{8} * in_dim;
  const uint16_t* xp[kN];
  bool has[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    has[n] = g + 8 * n < rows;
    xp[n] = x + int64_t{has[n] ? g + 8 * n : 0} * in_dim + 8 * c;
  }
  float acc[kN][4] = {};
  auto load = [&](int j, Stage<kN, kUnroll>& s) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool in = j + u < end;
      const int64_t k = int64_t{j + u} * 32;
      s.a[u][0] = in ? LoadOnce(w0 + k) : make_uint4(0, 0, 0, 0);
      s.a[u][1] = in ? LoadOnce(w1 + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        s.b[u][n] = in && has[n] ? __ldg(reinterpret_cast<const uint4*>(xp[n] + k)) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto compute = [&](const Stage<kN, kUnroll>& s) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        Mma(acc[n], s.a[u][0].x, s.a[u][1].x, s.a[u][0].y, s.a[u][1].y, s.b[u][n].x, s.b[u][n].y);
        Mma(acc[n], s.a[u][0].z, s.a[u][1].z, s.a[u][0].w, s.a[u][1].w, s.b[u][n].z, s.b[u][n].w);
      }
    }
  };
  if (begin < end) {
    Stage<kN, kUnroll> cur;
    load(begin, cur);
    for (int j = begin + kUnroll; j < end; j += kUnroll) {
      Stage<kN, kUnroll> next;
      load(j, next);  // in flight while `cur` is multiplied
      compute(cur);
      cur = next;
    }
    compute(cur);
  }
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][n * 4 + i][lane] = acc[n][i];
  }
  __syncthreads();
  for (int v = threadIdx.x; v < kSlots * 32; v += blockDim.x) {
    const int slot = v / 32, l = v % 32, n = slot / 4, i = slot % 4;
    // Accumulator i of lane l: output (l / 4) + 8 (i / 2) of the tile, row 2 (l % 4) + i % 2
    // of fragment n.
    const int o = o0 + l / 4 + (i / 2) * 8, r = 8 * n + 2 * (l % 4) + i % 2;
    if (r >= rows) continue;
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][slot][l];
    out[int64_t{r} * out_dim + o] = sum;
  }
}

}  // namespace

cudaError_t SkinnyMatMulAsync(const uint16_t* x, const uint16_t* w, float* out, int rows, int in_dim, int out_dim,
                              cudaStream_t stream) {
  const int blocks = out_dim / 16;
  // Stages of 8 chunks (16 KB of weights in flight a warp); 4 where x takes twice the
  // registers.
  if (rows > 8) {
    SkinnyMatMulKernel<2, 4><<<blocks, kWarps * 32, 0, stream>>>(x, w, out, rows, in_dim, out_dim);
  } else {
    SkinnyMatMulKernel<1, 8><<<blocks, kWarps * 32, 0, stream>>>(x, w, out, rows, in_dim, out_dim);
  }
  return cudaGetLastError();
}

}  // namespace strata::kernels::internal
