// ModelBackend: one Llama-family model on one device (the CPU reference, or a CUDA GPU),
// as the engine drives it: sequences that hold KV, forward steps over a batch of them,
// and the hand-off of position-free KV to and from the session cache's chunks.
//
// The engine loop is the only caller: no method is thread-safe, and each returns once its
// results are ready (a device backend synchronises before returning what the host reads).
#ifndef STRATA_MODEL_MODEL_BACKEND_H_
#define STRATA_MODEL_MODEL_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_config.h"
#include "storage/chunk_format.h"

namespace strata::model {

// The KV one running sequence holds in a backend, for tokens [0, its length). Opaque to
// the engine; created by NewSequence and used only with the backend that made it.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
};

// How the next token is drawn from the last token's logits: kernels::SampleToken's
// arguments (temperature <= 0: the argmax, lowest index on ties).
struct TokenSampling {
  float temperature = 0.0f;
  float top_p = 1.0f;
  double u = 0.0;  // uniform in [0, 1)
};

// One sequence's share of a forward step: `tokens` sit at positions
// [start_pos, start_pos + tokens.size()); the KV of [0, start_pos) is already held.
struct ForwardEntry {
  SequenceState* seq;
  int64_t start_pos;
  absl::Span<const int32_t> tokens;
  float* logits = nullptr;  // if non-null: receives [vocab] logits of the last token
  int32_t* token = nullptr;  // if non-null: receives the next token, drawn as `sampling` says
  TokenSampling sampling = {};
};

// The KV a backend moved between the session cache's chunks and its own KV memory.
// A host backend's copies complete as they are called: it counts bytes only.
struct KvTransferStats {
  int64_t loads = 0;                // rounds of loads started (StartKvTransfers with chunks queued)
  int64_t load_bytes = 0;           // bytes copied from chunk payloads into KV memory
  double load_seconds = 0;          // device time of the loads, first copy to last placement, summed
  double load_stall_seconds = 0;    // time steps waited at a layer for its loads to land
  int64_t save_bytes = 0;           // bytes copied from KV memory into chunk payloads
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual const ModelConfig& config() const = 0;
  // "cpu" or "cuda".
  virtual std::string name() const = 0;
  // Identifies the model and the format of the KV it stores: in every chunk, so KV of one
  // model (or of one stored precision) is never served to another.
  virtual uint64_t fingerprint() const = 0;
  // Bytes of one stored K or V row (kv_dim values): 4 per value for fp32, 2 for bf16.
  virtual int64_t kv_row_bytes() const = 0;

  // The most tokens one sequence can ever hold in the backend's KV memory (all of it).
  virtual int64_t kv_capacity_tokens() const { return std::numeric_limits<int64_t>::max(); }

  // A sequence that can hold up to `capacity_tokens` tokens. ResourceExhausted when the
  // backend's KV memory has no room for it now (it may once running sequences end).
  virtual absl::StatusOr<std::unique_ptr<SequenceState>> NewSequence(int64_t capacity_tokens) = 0;

  // A sequence on a shared prefix (a system prompt computed once): its tokens
  // [0, prefix_tokens) are `prefix`'s KV, read and never written, and it holds up to
  // `capacity_tokens` tokens of its own after them (positions prefix_tokens on: Forward,
  // LoadKv and SaveKv take positions in the whole sequence, never below prefix_tokens).
  // `prefix` is a sequence of this backend holding at least prefix_tokens tokens, with no
  // prefix of its own; the new sequence keeps it alive. Attention reads the prefix once
  // for all the sequences on it in a step (relay attention). Unimplemented where
  // shares_prefixes() is false: the caller then computes the prefix inline, per sequence.
  virtual bool shares_prefixes() const { return false; }
  virtual absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceOnPrefix(
      std::shared_ptr<const SequenceState> /*prefix*/, int64_t /*prefix_tokens*/, int64_t /*capacity_tokens*/) {
    return absl::UnimplementedError(name() + " does not share prefixes between sequences");
  }

  // Changes `seq`'s capacity to `capacity_tokens`, keeping the KV of its first
  // min(old, new capacity) tokens (capacity counts a prefixed sequence's own tokens): a finished turn's sequence shrinks to what it holds
  // while it waits in the HBM tier, and grows again when its session returns.
  // ResourceExhausted (nothing changed) when the backend's KV memory has no room for the
  // growth now; InvalidArgument for a sequence of another backend or a capacity outside
  // 1..max_context.
  virtual absl::Status ResizeSequence(SequenceState& seq, int64_t capacity_tokens) = 0;
  // Bytes of KV memory one token of a sequence's capacity takes: every layer's three
  // planes (K rotated, K before RoPE, V) of one stored row each, in both backends.
  int64_t kv_bytes_per_token() const { return int64_t{3} * config().num_layers * kv_row_bytes(); }

  // Runs one step over all entries (each sequence at most once). InvalidArgument for a
  // sequence from another backend or tokens past its capacity; Internal for a device fault.
  virtual absl::Status Forward(absl::Span<const ForwardEntry> batch) = 0;

  // Places stored, position-free KV of tokens [begin, begin + count) into `seq` from a
  // chunk payload laid out as `layout` (row of token begin + i at RowOffset(l, kv, i);
  // K before RoPE): K is rotated to each token's position. A device backend may only
  // queue the copy (it starts at StartKvTransfers or the next Forward, which waits for
  // it): the payload must stay as it is until KvTransfersDone says so for a ticket taken
  // after the call, or FinishKvTransfers returns.
  virtual absl::Status LoadKv(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                              const storage::ChunkLayout& layout) = 0;
  // LoadKv from the middle of a chunk: rows [first_row, first_row + count) of `payload`
  // become tokens [begin, begin + count) of `seq`. Stored KV is position-free, so a
  // conversation cut to fit the context window places its kept tokens' rows at their new,
  // earlier positions (K rotated for those). first_row 0 is LoadKv. Unimplemented where a
  // backend cannot place rows from inside a chunk: the caller then computes those tokens.
  virtual absl::Status LoadKvRows(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                                  const storage::ChunkLayout& layout, int first_row) {
    if (first_row == 0) return LoadKv(seq, begin, count, payload, layout);
    return absl::UnimplementedError(name() + " places stored KV from a chunk's first row only");
  }
  // The reverse: writes the KV of tokens [begin, begin + count) of `seq` (K before RoPE,
  // as the projection produced it) into a chunk payload, which holds it once
  // KvSavesDone says so for a ticket from MarkKvSaves taken after the call (or
  // FinishKvSaves returns). Until then the rows saved must stay as they are and `seq` must
  // not shrink or go: a device backend still reads them. It may grow (a device backend adds
  // pages without moving the held ones; a host backend's saves complete as called), and
  // Forward or LoadKv may write positions after every row being saved — a session's next
  // turn runs on it that way (engine/engine_kv.cc).
  virtual absl::Status SaveKv(const SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                              const storage::ChunkLayout& layout) = 0;

  // Starts the loads queued so far (a device backend moves them beside the next steps)
  // and returns a ticket for every transfer started. Internal on a device fault: what the
  // queued loads were to place is then unknown (the sequences must be recomputed).
  virtual absl::StatusOr<uint64_t> StartKvTransfers() { return uint64_t{0}; }
  // Whether the transfers of `ticket` (and those before) have completed: the payloads
  // they read may go. Never blocks. Internal on a device fault.
  virtual absl::StatusOr<bool> KvTransfersDone(uint64_t /*ticket*/) { return true; }
  // A ticket for every SaveKv so far, and whether those of `ticket` have completed (their
  // payloads hold the rows; the sequences are free again). Never blocks. Internal on a
  // device fault. Saves since the last ticket that FinishKvSaves could not complete make
  // the next MarkKvSaves return that error, once (they never land): a caller failing them
  // itself takes it back with one more MarkKvSaves.
  virtual absl::StatusOr<uint64_t> MarkKvSaves() { return uint64_t{0}; }
  virtual absl::StatusOr<bool> KvSavesDone(uint64_t /*ticket*/) { return true; }
  // Waits until every LoadKv and SaveKv so far has completed: then loaded KV is in place
  // (Forward waits for that on its own) and saved payloads hold their rows. Internal for a
  // device fault. A host backend's transfers complete as they are called.
  virtual absl::Status FinishKvTransfers() { return absl::OkStatus(); }
  // Waits until every SaveKv so far has completed (and the loads those saves read rows
  // of), not for other loads still in flight: the end of a turn need not wait for the
  // next turns' histories.
  virtual absl::Status FinishKvSaves() { return FinishKvTransfers(); }

  // What the KV transfers with the session cache moved and took, totals since the backend
  // was made. Thread-safe (a metrics scrape reads it while the engine loop runs).
  virtual KvTransferStats kv_transfer_stats() const { return {}; }

  // Tells the backend that chunk payloads will lie in `memory` (the host tier's arena),
  // which outlives the backend: a device backend pins it so loads and saves are DMA.
  // Errors only say that copies stay staged; nothing else changes.
  virtual absl::Status RegisterHostMemory(absl::Span<std::byte> /*memory*/) { return absl::OkStatus(); }
  // Sets up what SaveKv of chunks of `layout` needs (a device backend's staging buffers), so
  // that the first write-back allocates nothing. Errors leave that to the first SaveKv.
  virtual absl::Status PrepareKvSaves(const storage::ChunkLayout& /*layout*/) { return absl::OkStatus(); }
};

// The chunk layout the session cache must use for `backend`'s KV.
storage::ChunkLayout ChunkLayoutFor(const ModelBackend& backend, int chunk_tokens);

}  // namespace strata::model

#endif  // STRATA_MODEL_MODEL_BACKEND_H_
