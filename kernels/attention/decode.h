// kernels/attention: attention over the paged KV pool on the device, and its CPU
// specification. Files: paged_kv.h (the pool as index arrays), attention_cpu.h (CPU
// attention returning (o, lse), what the CPU engine runs), decode.h (this: split-K paged
// decode), prefill.h (paged prefill on CUDA cores and on tensor cores), merge_launch.h (the
// (o, lse) merge split-K uses). The paged CPU twins and the CPU merge, which only tests use,
// are in kernels/testing/attention_cpu.h. Supported shapes: kernels/dispatch.h.
//
// Conventions of every Launch* in this folder: the pointers in the params (PagedKv's
// included) are device pointers the caller owns and keeps valid until the stream reaches the
// work; the call only enqueues on `stream` (never creates or synchronises one) and is
// thread-safe. InternalError, naming the CUDA error, when the launch fails; Unimplemented
// when strata was built without CUDA.
#ifndef STRATA_KERNELS_ATTENTION_DECODE_H_
#define STRATA_KERNELS_ATTENTION_DECODE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/stream.h"

namespace strata::kernels {

// PagedDecodeAttention (kernels/testing/attention_cpu.h) on the device: one query per
// sequence, q [batch][num_heads][head_dim] (fp32, rotated), against every token of its
// sequence; out [batch][num_heads][head_dim], lse [batch][num_heads] (may be null).
//
// Split along the sequence: each sequence's tokens go in parts of equal size, each part's
// (o, lse) is computed by one block per (part, KV head, sequence) that serves all the KV
// head's query heads in one pass over the part's K and V (16-byte cp.async loads, kept
// several stages in flight), then the parts are merged by log-sum-exp (skipped when there
// is one part). The number of parts is chosen from batch x KV heads against the device's
// multiprocessor count (kDecodeBlocksPerSm blocks per SM), parts being multiples of
// kDecodePartAlign tokens. `max_tokens` bounds every sequence's length (with the batch it
// sets the number of parts); `workspace` holds DecodeWorkspaceFloats(...) floats (unused
// when one part suffices). q, k_pages and v_pages must be 16-byte aligned (cudaMalloc'd
// buffers are); the tensor-core form writes out in pairs of floats, so it needs out 8-byte
// aligned (kAuto takes the CUDA cores for any other out; kTensorCores refuses it).
//
// Errors: InvalidArgument (nothing launched) for negative sizes, unless head_dim is 64, 80,
// 96, 128 or 256, there are 1 to 64 query heads per KV head (dispatch.h) and page_size > 0,
// for misaligned q, k_pages or v_pages, and for max_tokens beyond int32.
//
// Numerics: within 1e-5 of the CPU; but the split depends on the batch size and
// max_tokens, and the merge's form on whether out and the workspace are 16-byte aligned,
// so a sequence's result may differ in the last bits between batches of different shapes
// or buffers of different alignment (the same call on the same device gives the same bits).
constexpr int kDecodeBlocksPerSm = 2;
constexpr int kDecodePartAlign = 32;

// Which kernel runs a decode: the CUDA-core kernel above, or the tensor-core prefill kernel
// with one 16-row tile per (part, KV head and subgroup, sequence) — the subgroup's query
// heads as the tile's rows (FlashInfer's use_tensor_cores for GQA decode). On CUDA cores
// every head's scores take their own shuffle reduction and exponentials per token, so past
// about 4 heads per KV head the kernel stops being bound by the KV it reads; on tensor
// cores a block is one warp and its 16 rows cost the same for any group. kAuto, as
// decode_attention_bench measured (docs/BENCHMARKS.md), takes the tensor cores at head_dim
// up to 128 with kTensorCoreDecodeMinGroup or more heads per block, at any batch and length
// (1.1-1.9x for one to four sequences of 1K-32K tokens since the parts cost model,
// decode_parts.h), or at head_dim 80 4+ heads from a batch of kTensorCoreDecodeMinBatchAt80
// (1.06-1.3x there; on an H100 head_dims 64, 96 and 128 with 4 heads are within a few
// percent either way, or faster on the CUDA cores), or, on a device of fast memory
// (kTensorCoreDecodeFastMemoryBandwidth below), at head_dim 80-128 from 4 heads; elsewhere
// the CUDA cores are as fast or faster. The
// tensor-core decode rounds q to bf16: its results are within bf16 tolerance of the
// CUDA-core kernel's, not bit-equal.
enum class DecodeKernel { kAuto, kCudaCores, kTensorCores };
// How a decode's first kernel is launched, for relay attention's context part beside its
// system part (relay.h):
//   dependent: as a programmatic dependent of the stream's previous kernel (Hopper's PDL,
//              kernels/dependent_launch.cuh): it may start while that kernel's last blocks
//              run, on the SMs they leave, so it must not read what that kernel writes; the
//              work after the decode on the stream still waits for both.
struct DecodeLaunch {
  bool dependent = false;
};
constexpr int kTensorCoreDecodeMinGroup = 5;
constexpr int kTensorCoreDecodeMinBatchAt80 = 8;
// On a device whose memory streams at least this many bytes a second (peak: an H200's 4.8
// TB/s, not an H100's 3.35), kAuto takes the tensor cores from 4 heads per block at head_dim
// 80, 96 and 128: the CUDA-core kernel's per-head arithmetic no longer keeps up with the KV
// (decode_attention_bench on the H200: Llama-3-8B's GQA 4 1.1-1.45x faster from batch 8, and
// 1.0-1.45x at batches 1-16 of 1K-32K but 4 x 1K, 2 us slower; head_dim 64 within a few
// percent either way, so it stays on the CUDA cores; docs/BENCHMARKS.md).
constexpr double kTensorCoreDecodeFastMemoryBandwidth = 4e12;

struct DecodeAttentionParams {
  const float* q;
  PagedKv kv;
  int batch, num_heads;
  float scale;
  int64_t max_tokens;
  float* workspace;
  float* out;
  float* lse;  // may be null
  DecodeKernel kernel = DecodeKernel::kAuto;
  // When set, the output rows are written here as bf16 (ToBf16's rounding of what `out`
  // would hold; the o projection's input), and `out` is only scratch: the CUDA-core kernel
  // and a split decode's merge store bf16 directly, the tensor-core kernel's lone part is
  // written to `out` and cast. 8-byte aligned.
  uint16_t* out_bf16 = nullptr;
  DecodeLaunch launch = {};
  // The rows' typical length (their mean), where they differ: the split then has parts no
  // longer than it (decode_parts.h, PartsForUnevenRows), up to DecodeMostParts. 0: the rows
  // are taken as max_tokens long. Like max_tokens, it sets the split, so the same value
  // gives the same bits.
  int64_t typical_tokens = 0;
};
absl::Status LaunchPagedDecodeAttention(const DecodeAttentionParams& p, cudaStream_t stream);

// True when LaunchPagedDecodeAttention with `kernel` runs a decode of this shape on the
// tensor cores (the rule above for kAuto); false without CUDA and for shapes it refuses.
bool DecodeRunsOnTensorCores(DecodeKernel kernel, int head_dim, int num_heads, int kv_heads, int batch,
                             int64_t max_tokens);

// Floats of workspace a decode (or CUDA-core prefill, with batch = its rows) of this shape
// needs; 0 for empty shapes and without CUDA. Reads the current device's SM count.
int64_t DecodeWorkspaceFloats(int batch, int num_heads, int head_dim, int64_t max_tokens);

// The most parts a decode of this shape splits each sequence into (what DecodeWorkspaceFloats
// holds); 1 without CUDA.
int DecodeMostParts(int batch, int64_t max_tokens);

// For benchmarks: the parts each sequence's keys are split into on the tensor-core decode
// (at most what the workspace holds), or 0 for the launch's own choice. Process-wide.
void SetTensorCoreDecodePartsForBenchmarks(int parts);

// The tensor-core decode runs one part in four-warp blocks where a part's blocks number
// about one an SM (decode_parts.h's TensorCoreDecodeFourWarps), and else a pick of two
// parts as one part whose block's two warps split its keys (kAuto; forced part counts
// stay in one-warp blocks). For tests and
// benchmarks: kNever keeps one-warp blocks, kAlways runs every tensor-core decode (forced
// part counts included) in two-warp blocks, kFour in four-warp blocks. Process-wide.
enum class KeyWarps { kAuto, kNever, kAlways, kFour };
void SetTensorCoreDecodeKeyWarpsForTesting(KeyWarps mode);

// For tests: the parts the last decode launched in this process split each sequence into
// (either kernel; 0 before any, and without CUDA).
int LastDecodePartsForTesting();
// For tests: whether the last decode launched in this process ran on the tensor cores.
bool LastDecodeOnTensorCoresForTesting();

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ATTENTION_DECODE_H_
