// The CUDA backend's KV transfers on the GPU: loads of stored KV (whole, from inside a
// chunk, layer by layer beside a step) give the logits computed KV gives, transfers finish
// only once their copies landed, and saves (staged or direct) are enqueued without
// waiting and write the same bytes. Skips, saying so, without a GPU.
#include "model/cuda/cuda_model.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kernels/testing/delay.h"
#include "model/cuda/cuda_model_test_support.h"
#include "model/cuda/kv_loader.h"
#include "model/cuda/kv_pool.h"

namespace strata::model {
namespace {

using test_support::CudaModelTest;

TEST_F(CudaModelTest, LoadedKvGivesTheSameLogitsAsComputedKv) {
  ModelConfig c = Config();
  auto model = CudaModel::Create(ModelWeights::Random(c, 9, {}), SmallPool());
  ASSERT_TRUE(model.ok()) << model.status();
  CudaModel& m = **model;
  const int chunk = 32, prompt = 50;
  const storage::ChunkLayout layout = ChunkLayoutFor(m, chunk);
  const std::vector<int32_t> tokens = Tokens(prompt + 1, 3);
  auto computed = m.NewSequence(prompt + 1);
  auto loaded = m.NewSequence(prompt + 1);
  ASSERT_TRUE(computed.ok() && loaded.ok());
  ForwardEntry fill{computed->get(), 0, absl::Span<const int32_t>(tokens.data(), prompt)};
  ASSERT_TRUE(m.Forward({&fill, 1}).ok());
  // Save in chunks, then place them into the other sequence, as the session cache does
  // (each chunk its own payload: a load reads it until its transfer is done).
  std::vector<std::vector<std::byte>> payloads;
  for (int begin = 0; begin < prompt; begin += chunk) {
    const int count = std::min(chunk, prompt - begin);
    std::vector<std::byte>& payload = payloads.emplace_back(static_cast<size_t>(layout.PayloadBytes()));
    ASSERT_TRUE(m.SaveKv(**computed, begin, count, absl::MakeSpan(payload), layout).ok());
    ASSERT_TRUE(m.LoadKv(**loaded, begin, count, payload, layout).ok());
  }
  const std::vector<std::byte>& payload = payloads.back();
  std::vector<float> a(c.vocab_size), b(c.vocab_size);
  ForwardEntry ea{computed->get(), prompt, absl::Span<const int32_t>(tokens.data() + prompt, 1), a.data()};
  ForwardEntry eb{loaded->get(), prompt, absl::Span<const int32_t>(tokens.data() + prompt, 1), b.data()};
  ASSERT_TRUE(m.Forward({&ea, 1}).ok());
  ASSERT_TRUE(m.Forward({&eb, 1}).ok());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
      << "KV placed from the session cache must equal the KV the forward pass computed";
  // The stored rows are position-free K: placing them shifted changes the result.
  EXPECT_TRUE(absl::IsInvalidArgument(m.LoadKv(**loaded, prompt, chunk, payload, layout)))
      << "rows past the sequence's capacity are refused";
}

// Rows from inside a chunk (a conversation cut to fit the window keeps a run of its stored
// tokens at earlier positions) are placed exactly as the same rows at the front of a chunk
// are: the loader's index skips the rows before first_row and after the run.
TEST_F(CudaModelTest, KvLoadedFromInsideAChunkEqualsTheSameRowsLoadedFromItsFront) {
  ModelConfig c = Config();
  auto model = CudaModel::Create(ModelWeights::Random(c, 10, {}), SmallPool());
  ASSERT_TRUE(model.ok()) << model.status();
  CudaModel& m = **model;
  const int chunk = 32, first = 12, kept = 17;
  const storage::ChunkLayout layout = ChunkLayoutFor(m, chunk);
  const std::vector<int32_t> tokens = Tokens(chunk + 1, 4);
  auto computed = *m.NewSequence(chunk);
  ForwardEntry fill{computed.get(), 0, absl::Span<const int32_t>(tokens.data(), chunk)};
  ASSERT_TRUE(m.Forward({&fill, 1}).ok());
  std::vector<std::byte> payload(static_cast<size_t>(layout.PayloadBytes()));
  ASSERT_TRUE(m.SaveKv(*computed, 0, chunk, absl::MakeSpan(payload), layout).ok());
  ASSERT_TRUE(m.FinishKvSaves().ok());
  std::vector<std::byte> front(payload.size(), std::byte{0x7f});  // the same rows first
  for (int l = 0; l < c.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::memcpy(front.data() + layout.RowOffset(l, kv, 0), payload.data() + layout.RowOffset(l, kv, first),
                  static_cast<size_t>(kept * layout.row_bytes));
    }
  }
  auto logits_after = [&](SequenceState& seq) {
    std::vector<float> out(static_cast<size_t>(c.vocab_size));
    ForwardEntry e{&seq, kept, absl::Span<const int32_t>(tokens.data() + chunk, 1), out.data()};
    EXPECT_TRUE(m.Forward({&e, 1}).ok());
    return out;
  };
  auto from_inside = *m.NewSequence(kept + 1);
  auto from_front = *m.NewSequence(kept + 1);
  auto from_start = *m.NewSequence(kept + 1);
  ASSERT_TRUE(m.LoadKvRows(*from_inside, 0, kept, payload, layout, first).ok());
  ASSERT_TRUE(m.LoadKv(*from_front, 0, kept, front, layout).ok());
  ASSERT_TRUE(m.LoadKv(*from_start, 0, kept, payload, layout).ok());
  const std::vector<float> inside = logits_after(*from_inside);
  EXPECT_EQ(inside, logits_after(*from_front)) << "rows placed from inside a chunk differ from the same rows";
  EXPECT_NE(inside, logits_after(*from_start)) << "the row offset was not honoured";
  EXPECT_TRUE(absl::IsInvalidArgument(m.LoadKvRows(*from_front, 0, kept, payload, layout, chunk - kept + 1)))
      << "rows past the chunk's end are refused";
}

// Histories loaded layer by layer beside the step that reads them, three sequences at
// once (of 1, 2 and 3 chunks, the last ones short), give the logits their computed KV
// gives: through read buffers of 1 to 3 layers, groups of one chunk to all of them, and
// with the copy, place and write streams slowed on purpose (a step that did not wait for
// its layer's event, or a load that did not wait for the save it reads, would see rows
// not yet written).
TEST_F(CudaModelTest, LayerWiseLoadsBesideAStepEqualComputedKv) {
  const ModelConfig c = Config();
  const ModelWeights weights = ModelWeights::Random(c, 9, {});
  const int chunk = 32;
  const std::vector<int> prompts = {20, 50, 90};
  const int n = static_cast<int>(prompts.size());
  struct Case {
    int buffer_layers;
    int64_t group_tokens;
    bool slow;
  };
  // (The builtin model's chunk layer is 16 KiB: one DMA takes up to half the buffer's
  // layers, all 4 with 8, 3 then 1 with 6.)
  for (const Case k : {Case{2, 16384, false}, Case{1, 32, false}, Case{3, 64, true}, Case{8, 16384, false},
                       Case{6, 64, true}}) {
    SCOPED_TRACE(::testing::Message() << "buffer_layers " << k.buffer_layers << ", group_tokens " << k.group_tokens
                                    << (k.slow ? ", streams slowed" : ""));
    CudaModelOptions o = SmallPool();
    o.kv_read_buffer_layers = k.buffer_layers;
    o.kv_read_group_tokens = k.group_tokens;
    auto model = CudaModel::Create(weights, o);
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModel& m = **model;
    const storage::ChunkLayout layout = ChunkLayoutFor(m, chunk);
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::unique_ptr<SequenceState>> computed, loaded;
    std::vector<std::vector<std::vector<std::byte>>> payloads(static_cast<size_t>(n));
    for (int b = 0; b < n; ++b) {
      tokens.push_back(Tokens(prompts[b] + 1, 5 + b));
      computed.push_back(*m.NewSequence(prompts[b] + 1));
      ForwardEntry fill{computed.back().get(), 0, absl::Span<const int32_t>(tokens[b].data(), prompts[b])};
      ASSERT_TRUE(m.Forward({&fill, 1}).ok());
      if (k.slow) ASSERT_EQ(kernels::testing::LaunchDelay(m.WriteStreamForTesting(), 20000), cudaSuccess);
      for (int begin = 0; begin < prompts[b]; begin += chunk) {
        auto& payload = payloads[b].emplace_back(static_cast<size_t>(layout.PayloadBytes()));
        ASSERT_TRUE(m.SaveKv(*computed.back(), begin, std::min(chunk, prompts[b] - begin), absl::MakeSpan(payload),
                             layout).ok());
      }
    }
    // The reference: one step over the computed sequences.
    std::vector<std::vector<float>> want(static_cast<size_t>(n), std::vector<float>(c.vocab_size));
    std::vector<std::vector<float>> got = want;
    std::vector<ForwardEntry> batch;
    for (int b = 0; b < n; ++b) {
      batch.push_back({computed[b].get(), prompts[b], absl::Span<const int32_t>(&tokens[b][prompts[b]], 1),
                       want[b].data()});
    }
    ASSERT_TRUE(m.Forward(batch).ok());
    ASSERT_TRUE(m.FinishKvSaves().ok());
    // All three loaded at once and read by the very next step, with nothing waited on the host.
    if (k.slow) {
      ASSERT_EQ(kernels::testing::LaunchDelay(m.LoadCopyStreamForTesting(), 20000), cudaSuccess);
      ASSERT_EQ(kernels::testing::LaunchDelay(m.LoadPlaceStreamForTesting(), 20000), cudaSuccess);
    }
    batch.clear();
    for (int b = 0; b < n; ++b) {
      loaded.push_back(*m.NewSequence(prompts[b] + 1));
      for (int begin = 0, j = 0; begin < prompts[b]; begin += chunk, ++j) {
        ASSERT_TRUE(m.LoadKv(*loaded.back(), begin, std::min(chunk, prompts[b] - begin), payloads[b][j], layout).ok());
      }
      batch.push_back({loaded[b].get(), prompts[b], absl::Span<const int32_t>(&tokens[b][prompts[b]], 1),
                       got[b].data()});
    }
    ASSERT_TRUE(m.Forward(batch).ok());
    for (int b = 0; b < n; ++b) {
      EXPECT_EQ(0, std::memcmp(got[b].data(), want[b].data(), got[b].size() * sizeof(float)))
          << "sequence " << b << ": KV loaded beside the step differs from the computed KV";
    }
    ASSERT_TRUE(m.FinishKvTransfers().ok());
  }
}

// A sequence that ends while a load into it is held up gives its pages back only once the
// load no longer writes them: the next sequence, which takes those very pages, computes
// the logits of a sequence on pages no load ever touched (without the fence, the late
// placement overwrote its KV after the step wrote it: a turn cancelled before its first
// step, or a step that failed after starting its loads).
TEST_F(CudaModelTest, PagesOfASequenceEndedWithALoadInFlightAreNotWrittenByIt) {
  ModelConfig c = Config();
  auto model = CudaModel::Create(ModelWeights::Random(c, 6, {}), SmallPool());
  ASSERT_TRUE(model.ok()) << model.status();
  CudaModel& m = **model;
  const int n = 64;
  const storage::ChunkLayout layout = ChunkLayoutFor(m, n);
  const std::vector<int32_t> stored = Tokens(n, 5), asked = Tokens(n + 1, 8);
  std::vector<float> want(c.vocab_size), got(c.vocab_size);
  std::vector<std::byte> want_kv(static_cast<size_t>(layout.PayloadBytes())), got_kv = want_kv;
  {  // The reference: `asked` on fresh pages.
    auto fresh = *m.NewSequence(n + 1);
    ForwardEntry prefill{fresh.get(), 0, absl::Span<const int32_t>(asked.data(), n)};
    ForwardEntry last{fresh.get(), n, absl::Span<const int32_t>(asked.data() + n, 1), want.data()};
    ASSERT_TRUE(m.Forward({&prefill, 1}).ok());
    ASSERT_TRUE(m.SaveKv(*fresh, 0, n, absl::MakeSpan(want_kv), layout).ok());
    ASSERT_TRUE(m.FinishKvTransfers().ok());
    ASSERT_TRUE(m.Forward({&last, 1}).ok());
  }
  std::vector<std::byte> payload(static_cast<size_t>(layout.PayloadBytes()));
  {
    auto source = *m.NewSequence(n);
    ForwardEntry fill{source.get(), 0, stored};
    ASSERT_TRUE(m.Forward({&fill, 1}).ok());
    ASSERT_TRUE(m.SaveKv(*source, 0, n, absl::MakeSpan(payload), layout).ok());
    ASSERT_TRUE(m.FinishKvTransfers().ok());
  }
  {  // One load first: the loader's buffers are allocated then (an allocation waits for the device)
    auto warm = *m.NewSequence(n);
    ASSERT_TRUE(m.LoadKv(*warm, 0, n, payload, layout).ok());
    ASSERT_TRUE(m.FinishKvTransfers().ok());
  }
  auto pages_of = [](const SequenceState& s) { return dynamic_cast<const cuda_internal::CudaSequence&>(s).pages(); };
  ASSERT_EQ(kernels::testing::LaunchDelay(m.LoadPlaceStreamForTesting(), 200000), cudaSuccess);
  auto ended = *m.NewSequence(n + 1);
  const std::vector<int32_t> ended_pages = pages_of(*ended);
  ASSERT_TRUE(m.LoadKv(*ended, 0, n, payload, layout).ok());
  ASSERT_TRUE(m.StartKvTransfers().ok());
  ended.reset();  // before any step read it
  auto next = *m.NewSequence(n + 1);
  ASSERT_EQ(pages_of(*next), ended_pages) << "the test needs the ended sequence's pages reused";
  ForwardEntry prefill{next.get(), 0, absl::Span<const int32_t>(asked.data(), n)};
  ForwardEntry last{next.get(), n, absl::Span<const int32_t>(asked.data() + n, 1), got.data()};
  ASSERT_TRUE(m.Forward({&prefill, 1}).ok());
  ASSERT_TRUE(m.FinishKvTransfers().ok());  // (the held-up load, if it still writes, has landed)
  ASSERT_TRUE(m.SaveKv(*next, 0, n, absl::MakeSpan(got_kv), layout).ok());
  ASSERT_TRUE(m.FinishKvTransfers().ok());
  EXPECT_EQ(0, std::memcmp(got_kv.data(), want_kv.data(), got_kv.size()))
      << "a load into a sequence that had ended wrote its next owner's KV";
  ASSERT_TRUE(m.Forward({&last, 1}).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
      << "a load into a sequence that had ended changed its next owner's answer";
}

// A load's ticket is done only once its copies have landed: the host chunks it reads
// stay leased until then.
TEST_F(CudaModelTest, KvTransfersDoneOnlyOnceTheCopiesLanded) {
  auto model = CudaModel::Create(ModelWeights::Random(Config(), 4, {}), SmallPool());
  ASSERT_TRUE(model.ok()) << model.status();
  CudaModel& m = **model;
  const storage::ChunkLayout layout = ChunkLayoutFor(m, 32);
  const std::vector<int32_t> tokens = Tokens(32, 1);
  auto computed = *m.NewSequence(32);
  auto loaded = *m.NewSequence(32);
  ForwardEntry fill{computed.get(), 0, tokens};
  ASSERT_TRUE(m.Forward({&fill, 1}).ok());
  std::vector<std::byte> payload(static_cast<size_t>(layout.PayloadBytes()));
  ASSERT_TRUE(m.SaveKv(*computed, 0, 32, absl::MakeSpan(payload), layout).ok());
  ASSERT_TRUE(m.FinishKvSaves().ok());
  ASSERT_EQ(kernels::testing::LaunchDelay(m.LoadCopyStreamForTesting(), 300000), cudaSuccess);
  ASSERT_TRUE(m.LoadKv(*loaded, 0, 32, payload, layout).ok());
  absl::StatusOr<uint64_t> ticket = m.StartKvTransfers();
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  absl::StatusOr<bool> done = m.KvTransfersDone(*ticket);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done) << "the copy stream is held up for 300 ms";
  ASSERT_TRUE(m.FinishKvTransfers().ok());
  done = m.KvTransfersDone(*ticket);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

// A long session's saves are only enqueued: with the write stream held up, SaveKv of
// every chunk returns at once (no wait on the host), and the ticket completes after. The
// chunks live in registered host memory, as the host tier's do (a copy to pageable
// memory waits for its stream).
TEST_F(CudaModelTest, SavesAreEnqueuedWithoutWaitingForTheWriteStream) {
  const int chunk = 8, chunks = 64;
  std::vector<std::byte> arena;  // outlives the model, which unregisters it
  auto model = CudaModel::Create(ModelWeights::Random(Config(), 4, {}), SmallPool());
  ASSERT_TRUE(model.ok()) << model.status();
  CudaModel& m = **model;
  const storage::ChunkLayout layout = ChunkLayoutFor(m, chunk);
  const std::vector<int32_t> tokens = Tokens(chunk * chunks, 3);
  auto computed = *m.NewSequence(chunk * chunks);
  ForwardEntry fill{computed.get(), 0, tokens};
  ASSERT_TRUE(m.Forward({&fill, 1}).ok());
  const size_t payload_bytes = static_cast<size_t>(layout.PayloadBytes());
  arena.resize(payload_bytes * chunks);
  ASSERT_TRUE(m.RegisterHostMemory(absl::MakeSpan(arena)).ok());
  std::vector<absl::Span<std::byte>> payloads;
  for (int i = 0; i < chunks; ++i) payloads.push_back(absl::MakeSpan(arena).subspan(payload_bytes * i, payload_bytes));
  ASSERT_EQ(kernels::testing::LaunchDelay(m.WriteStreamForTesting(), 400000), cudaSuccess);
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < chunks; ++i) {
    ASSERT_TRUE(m.SaveKv(*computed, int64_t{i} * chunk, chunk, payloads[i], layout).ok());
  }
  absl::StatusOr<uint64_t> ticket = m.MarkKvSaves();
  const absl::Duration enqueue = absl::Now() - t0;
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_LT(enqueue, absl::Milliseconds(200)) << "the saves waited for the write stream (held up 400 ms)";
  absl::StatusOr<bool> done = m.KvSavesDone(*ticket);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done);
  ASSERT_TRUE(m.FinishKvSaves().ok());
  done = m.KvSavesDone(*ticket);
  ASSERT_TRUE(done.ok() && *done);
  // What landed is the computed KV: loaded back, the next step's logits are the same.
  auto loaded = *m.NewSequence(chunk * chunks + 1);
  for (int i = 0; i < chunks; ++i) {
    ASSERT_TRUE(m.LoadKv(*loaded, int64_t{i} * chunk, chunk, payloads[i], layout).ok());
  }
  const int32_t next = 7;
  std::vector<float> want(m.config().vocab_size), got(m.config().vocab_size);
  auto grown = m.ResizeSequence(*computed, chunk * chunks + 1);
  ASSERT_TRUE(grown.ok()) << grown;
  ForwardEntry a{computed.get(), chunk * chunks, absl::Span<const int32_t>(&next, 1), want.data()};
  ASSERT_TRUE(m.Forward({&a, 1}).ok());
  ForwardEntry b{loaded.get(), chunk * chunks, absl::Span<const int32_t>(&next, 1), got.data()};
  ASSERT_TRUE(m.Forward({&b, 1}).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

// Saves into registered host memory are gathers writing the payloads through their
// device mapping (kv_save_direct_blocks), one launch for all queued; they write the bytes
// the staged path (gather into device staging, then a copy out) writes, and a partly
// filled chunk's other rows stay as they were.
TEST_F(CudaModelTest, DirectSavesWriteWhatStagedSavesWrite) {
  const ModelConfig c = Config();
  const int chunk = 32, n = 80;  // two full chunks and one of 16 tokens
  const std::vector<int32_t> tokens = Tokens(n, 5);
  std::vector<std::byte> arenas[2];  // outlive the models, which unregister them
  std::unique_ptr<CudaModel> models[2];
  storage::ChunkLayout layout;
  for (int direct = 0; direct < 2; ++direct) {
    CudaModelOptions o = SmallPool();
    o.kv_save_direct_blocks = direct == 1 ? 3 : 0;  // few blocks: each takes rows in turn
    auto made = CudaModel::Create(ModelWeights::Random(c, 11, {}), o);
    ASSERT_TRUE(made.ok()) << made.status();
    models[direct] = *std::move(made);
    CudaModel& m = *models[direct];
    layout = ChunkLayoutFor(m, chunk);
    const size_t bytes = static_cast<size_t>(layout.PayloadBytes());
    arenas[direct].assign(bytes * 3, std::byte{0x5a});
    ASSERT_TRUE(m.RegisterHostMemory(absl::MakeSpan(arenas[direct])).ok());
    auto seq = *m.NewSequence(n);
    ForwardEntry fill{seq.get(), 0, tokens};
    ASSERT_TRUE(m.Forward({&fill, 1}).ok());
    for (int i = 0; i * chunk < n; ++i) {
      const int count = std::min(chunk, n - i * chunk);
      ASSERT_TRUE(
          m.SaveKv(*seq, int64_t{i} * chunk, count, absl::MakeSpan(arenas[direct]).subspan(bytes * i, bytes), layout)
              .ok());
      // Direct saves wait to go out together: the first two at the ticket, the third at
      // the wait below.
      if (i == 1) ASSERT_TRUE(m.MarkKvSaves().ok());
    }
    ASSERT_TRUE(m.FinishKvSaves().ok());
  }
  ASSERT_EQ(arenas[0].size(), arenas[1].size());
  EXPECT_EQ(0, std::memcmp(arenas[0].data(), arenas[1].data(), arenas[0].size()))
      << "the direct gather wrote other bytes than the staged copy";
  const std::byte* last = arenas[1].data() + 2 * layout.PayloadBytes();
  for (int l = 0; l < c.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const std::byte* rows = last + layout.RowOffset(l, kv, 0);
      const std::byte* tail = last + layout.RowOffset(l, kv, 16);
      EXPECT_TRUE(std::any_of(rows, tail, [](std::byte b) { return b != std::byte{0x5a}; })) << l << " " << kv;
      EXPECT_TRUE(std::all_of(tail, tail + (chunk - 16) * layout.row_bytes, [](std::byte b) {
        return b == std::byte{0x5a};
      })) << "layer " << l << (kv ? " V" : " K") << ": rows past the chunk's 16 tokens were written";
    }
  }
}

}  // namespace
}  // namespace strata::model
