// CudaModel: the Llama-family forward pass on one CUDA GPU (Hopper first), bf16.
//
// Weights live in HBM as bf16 (Q, K and V projections fused into one matrix, gate and up
// into another); activations between kernels are fp32, matrix operands bf16, products
// accumulate in fp32 (cuBLAS). Each layer's KV lives in a paged pool in HBM with three
// planes (kernels/rope/kv_place_params.h): K rotated (attention reads it), K before RoPE and V
// (the session cache stores those, 2 bytes a value). A sequence reserves the pages for
// its capacity when it is created, so a running turn never runs out of KV memory.
//
// Every step is enqueued on the model's own stream and synchronised once at the end,
// before Forward returns (the engine reads the sampled tokens next). Not thread-safe:
// the engine loop is the only caller. Built without CUDA, Create returns
// FailedPrecondition.
#ifndef STRATA_MODEL_CUDA_CUDA_MODEL_H_
#define STRATA_MODEL_CUDA_CUDA_MODEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/attention/decode.h"
#include "kernels/attention/relay.h"
#include "model/model_backend.h"
#include "model/model_weights.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace strata::model {

struct CudaModelOptions {
  int device = 0;
  // The pool takes this fraction of the GPU memory free after the weights and the step
  // workspaces' first allocation, unless kv_pool_bytes is set.
  double kv_memory_fraction = 0.85;
  int64_t kv_pool_bytes = 0;
  int page_tokens = 32;
  // Most tokens of one forward step the workspaces are sized for up front (they grow
  // on demand past it).
  int initial_step_tokens = 1024;
  // Decode steps (one token per sequence, no logits copied out) run as captured CUDA
  // graphs, one per (batch size, context bucket: 1/16 of the next power of two, at least
  // 256 tokens), at most 256 kept.
  bool cuda_graphs = true;
  // Stored KV is loaded layer by layer through a read buffer of this many layers (each
  // up to kv_read_group_tokens tokens of chunks): see kv_loader.h.
  int kv_read_buffer_layers = 16;
  int64_t kv_read_group_tokens = 4096;
  int64_t kv_read_copy_bytes = int64_t{8} << 20;  // about what one DMA moves
  // Sequences on a shared prefix (a system prompt) share the prefix's whole pages in
  // their page lists (the rows of a last partial page are copied into their first own
  // page). Off: the engine computes prompts inline per sequence.
  bool share_prefixes = true;
  // Decode rows of two or more sequences on one shared prefix attend to it as a group
  // (relay attention, kernels/attention/relay.h): the prefix's KV is read once per group
  // and step. Off: each row reads the shared pages like its own.
  bool relay_attention = true;
  // ... where it pays: a group reads its prefix once instead of once per row, so relay
  // saves (rows - 1) x prefix tokens of KV reads and costs a few launches. Measured on the
  // H100 (relay_attention_bench, docs/BENCHMARKS.md) it breaks even near 12-14K tokens
  // saved (4 rows on a 4K prompt, 8 on a 2K one): groups saving fewer run plain.
  int64_t relay_min_saved_tokens = 16384;
  // A relay decode whose rows' own tokens (rows x the longest context) reach this many runs
  // its system part on a second stream beside the rows' decode (relay.h, RelaySide); else
  // both parts in one fused launch. Negative (the default): never. The side stream is
  // 6-10% faster at the kernel from 32K tokens (relay.h's kRelayBesideMinContextTokens) and
  // in eager steps, but slower in the decode graphs (relay_step_bench, docs/BENCHMARKS.md),
  // so it is opt-in; 0: always (tests).
  int64_t relay_beside_min_tokens = -1;
  // A relay decode whose rows' own tokens reach this many runs its three launches chained on
  // the step's stream, on a device with programmatic dependent launch (Hopper): the system
  // part first on the wgmma form, the decode a programmatic dependent of it (relay.h,
  // RelayDecodeParams::chained_min_context_tokens). Taken before the side stream; kept in
  // the decode graphs; 0: always (tests). The default, kRelayChainedOnTensorCores (-1):
  // chained where the decode runs on the tensor cores (decode_kernel's rule: 4+ query heads
  // a KV head on fast memory, e.g. the H200), where relay runs its three launches anyway;
  // kRelayChainedNever (-2): never. On the H100 with the CUDA-core decode, in
  // relay_step_bench's steps (64 rows, 4K prompt, 1K own) it was 0.94x the fused step in
  // graphs, and in the server's A/B 1.05x the fused relay's decode steps; on the H200 with
  // the tensor-core decode 0.96x the three launches' steps in relay_step_bench, 0.99x in the
  // server at 1K own tokens and 0.97x at issue 15's 128 (docs/BENCHMARKS.md).
  int64_t relay_chained_min_tokens = kernels::kRelayChainedOnTensorCores;
  // Prefill steps with few query tiles over long histories (a returning turn's new tokens)
  // split each tile's keys across the SMs and merge the parts (kernels/attention/prefill.h).
  // Off: one block per tile walks every key (kept for the benchmark's comparison).
  bool prefill_key_splits = true;
  // Decode rows of unequal length split their keys into parts no longer than the rows' mean
  // (step_plan.h's Step::typical_tokens; kernels/attention/decode_parts.h, PartsForUnevenRows),
  // so that one long row among short ones is not read by one block a head after the rest are
  // done. Off: parts sized for the longest row alone (kept for the benchmarks' comparison).
  bool split_uneven_rows = true;
  // The kernel of decode steps' attention (kernels/attention/decode.h's DecodeKernel: kAuto
  // takes the tensor cores by its measured rule), relay's context part included (on the
  // tensor cores relay runs as three launches). For A/Bs and devices the rule was not
  // measured on.
  kernels::DecodeKernel decode_kernel = kernels::DecodeKernel::kAuto;
  // A save into registered host memory (the host tier's arena) is one gather kernel of
  // this many blocks that writes the payload through its device mapping: the KV is read
  // from HBM once, with no staging written and read back by a DMA, and the few blocks
  // leave the SMs to the steps. 0: gather into device staging, then a D2H copy (always so
  // for pageable payloads).
  int kv_save_direct_blocks = 8;
  // The linear layers of decode steps of up to 16 sequences, and the LM head of up to 16
  // rows, run on strata's skinny tensor-core kernel, which reads the weights nearer the
  // copy rate than cuBLAS (kernels/gemm/skinny.cu), where a weight matrix holds at least
  // skinny_min_weight_bytes (a smaller one is a few microseconds either way). Off: cuBLAS
  // for every product. Neither kernel gives a row the same bits in a decode step as in a
  // step that also holds prompt rows (cuBLAS picks its kernel by the row count), so greedy
  // answers can part at a near-tie between runs whose steps were batched differently.
  bool skinny_matmul = true;
  int64_t skinny_min_weight_bytes = int64_t{4} << 20;
  // The products of decode steps that cuBLAS runs (17+ sequences) take the fastest of
  // cublasGemmEx's default and cublasLt's candidates, timed on the first eager step of each
  // batch size (about a millisecond a shape, once a process; kernels/gemm/cublas.h). The
  // choice is by time, so two processes may choose differently for a shape (each choice
  // sums every output in one pass, the same way every call). Off: the default everywhere.
  bool tune_matmuls = true;
  // With tune_matmuls, a decode step of more than 16 sequences runs its products for its
  // rows rounded up to a multiple of 8 (the extra rows' results are never read), and the
  // model tunes every such row count up to this many sequences when it is made (on the
  // H100, ~1 s more start-up at 64, ~3 s at 256; the server passes --max_batch), so no
  // step waits for tuning later.
  int tuned_decode_rows = 64;
};

class CudaModel final : public ModelBackend {
 public:
  // Number of visible CUDA devices; 0 without CUDA or without a GPU.
  static int DeviceCount();

  // Uploads `weights` (converted to bf16). FailedPrecondition without a GPU (naming
  // why); ResourceExhausted when they do not fit; InvalidArgument for a head_dim the
  // attention kernels do not take or a GQA group outside 1 to 64 (kernels/dispatch.h).
  static absl::StatusOr<std::unique_ptr<CudaModel>> Create(const ModelWeights& weights,
                                                           const CudaModelOptions& options);
  // A model of `config`'s shapes with deterministic random bf16 weights made on the GPU
  // (no host copy): for benchmarks at real-model sizes.
  static absl::StatusOr<std::unique_ptr<CudaModel>> CreateRandom(const ModelConfig& config, uint64_t seed,
                                                                 const CudaModelOptions& options);
  ~CudaModel() override;

  const ModelConfig& config() const override;
  std::string name() const override { return "cuda"; }
  uint64_t fingerprint() const override;
  int64_t kv_row_bytes() const override { return int64_t{config().kv_dim()} * 2; }
  int64_t kv_capacity_tokens() const override;  // the whole pool

  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequence(int64_t capacity_tokens) override;
  absl::Status ResizeSequence(SequenceState& seq, int64_t capacity_tokens) override;
  bool shares_prefixes() const override;
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceOnPrefix(std::shared_ptr<const SequenceState> prefix,
                                                                     int64_t prefix_tokens,
                                                                     int64_t capacity_tokens) override;
  absl::Status Forward(absl::Span<const ForwardEntry> batch) override;
  absl::Status LoadKv(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                      const storage::ChunkLayout& layout) override;
  absl::Status LoadKvRows(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                          const storage::ChunkLayout& layout, int first_row) override;
  absl::Status SaveKv(const SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                      const storage::ChunkLayout& layout) override;
  // LoadKv queues; StartKvTransfers (or the next Forward) moves the queued chunks layer
  // by layer on the read streams, and the step's layer l waits for layer l alone. SaveKv
  // enqueues on the write stream. Every hand-off between streams is an event.
  absl::StatusOr<uint64_t> StartKvTransfers() override;
  absl::StatusOr<bool> KvTransfersDone(uint64_t ticket) override;
  absl::Status FinishKvTransfers() override;
  KvTransferStats kv_transfer_stats() const override;
  absl::Status FinishKvSaves() override;
  absl::StatusOr<uint64_t> MarkKvSaves() override;
  absl::StatusOr<bool> KvSavesDone(uint64_t ticket) override;
  // cudaHostRegister of the host tier's arena (unregistered when the model goes).
  absl::Status RegisterHostMemory(absl::Span<std::byte> memory) override;
  // Allocates the save staging (one chunk's payload, the index room) before any save.
  absl::Status PrepareKvSaves(const storage::ChunkLayout& layout) override;

  // For benchmarks: fills every page of the pool with random bf16 values, so decode steps
  // can be timed at long contexts without computing them first.
  absl::Status RandomizeKvPool(uint64_t seed);
  // For benchmarks: CudaModelOptions::prefill_key_splits, skinny_matmul and tune_matmuls,
  // changed between steps (the latter two drop the captured step graphs).
  void set_prefill_key_splits(bool on);
  void set_skinny_matmul(bool on);
  void set_tune_matmuls(bool on);

  // Sizes, for logs and benchmarks.
  int64_t weight_bytes() const;
  int64_t pool_pages() const;
  int64_t free_pages() const;
  int page_tokens() const;

  // The transfer streams, for tests that slow them on purpose (a delay kernel enqueued
  // there must not change any result).
  CUstream_st* LoadCopyStreamForTesting() const;
  CUstream_st* LoadPlaceStreamForTesting() const;
  CUstream_st* WriteStreamForTesting() const;

  struct Impl;

 private:
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::model

#endif  // STRATA_MODEL_CUDA_CUDA_MODEL_H_
