// The CUDA backend against the CPU backend (the fp32 specification) on the same random
// weights, and the session-cache properties on the GPU. Skips, saying so, without a GPU.
#include "model/cuda/cuda_model.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attention/decode.h"
#include "kernels/attention/prefill.h"
#include "kernels/attention/relay.h"
#include "kernels/gemm/gemm.h"
#include "model/cpu/cpu_model.h"
#include "model/cuda/cuda_model_test_support.h"
#include "model/cuda/kv_loader.h"
#include "gtest/gtest.h"

namespace strata::model {
namespace {

// The rounds a load's DMAs go in (no GPU needed): every layer once and in order, none
// longer than the step, a half round first and one layer last.
TEST(KvLoaderRoundsTest, EveryLayerOnceInOrderAHalfRoundFirstAndOneLayerLast) {
  using cuda_internal::LoadRounds;
  for (int layers : {1, 2, 3, 7, 16, 28, 32, 36, 80}) {
    for (int step : {1, 2, 3, 4, 8, 16}) {
      SCOPED_TRACE(::testing::Message() << layers << " layers, step " << step);
      const std::vector<std::pair<int, int>> rounds = LoadRounds(layers, step);
      ASSERT_FALSE(rounds.empty());
      int next = 0;
      for (const auto& [first, n] : rounds) {
        EXPECT_EQ(first, next);
        EXPECT_GE(n, 1);
        EXPECT_LE(n, step);
        next = first + n;
      }
      EXPECT_EQ(next, layers);
      EXPECT_EQ(rounds.back().second, 1) << "the step's tail is one layer";
      if (layers > step && step > 1) EXPECT_EQ(rounds.front().second, step / 2);
    }
  }
  // Llama-3-8B's 32 layers in 8-layer rounds: 4, 8, 8, 8, then 4 halved down.
  const std::vector<std::pair<int, int>> want = {{0, 4}, {4, 8}, {12, 8}, {20, 8}, {28, 2}, {30, 1}, {31, 1}};
  EXPECT_EQ(LoadRounds(32, 8), want);
}

using test_support::Argmax;
using test_support::CudaModelTest;
using test_support::ExpectCudaMatchesCpu;
using test_support::RelativeError;

TEST_F(CudaModelTest, LogitsMatchTheCpuBackendWithinBf16) {
  // Decode steps' products on the skinny kernel (the default) and on cuBLAS.
  for (bool skinny : {true, false}) {
    for (bool bias : {false, true}) {
      CudaModelOptions o = SmallPool();
      o.skinny_matmul = skinny;
      o.skinny_min_weight_bytes = 0;  // the test model's matrices are below the default
      ExpectCudaMatchesCpu(ModelWeights::Random(Config(bias), 5, {}), o, Tokens(90, bias), 60,
                           "bias " + std::to_string(bias) + (skinny ? ", skinny products" : ", cuBLAS products"));
    }
  }
}

TEST_F(CudaModelTest, EveryDispatchedHeadSizeAndLargeGroupsMatchTheCpuBackend) {
  // head_dim 80, 96 and 256, and GQA 7 and 16 (decodes on the tensor cores), prefill + decode.
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  for (const Shape& shape : {Shape{4, 2, 80}, Shape{4, 2, 96}, Shape{4, 2, 256}, Shape{14, 2, 64}, Shape{16, 1, 64}}) {
    ModelConfig c = Config();
    c.num_heads = shape.heads;
    c.num_kv_heads = shape.kv_heads;
    c.head_dim = shape.head_dim;
    ASSERT_TRUE(c.Validate().ok()) << c.Validate();
    ExpectCudaMatchesCpu(ModelWeights::Random(c, 7, {}), SmallPool(), Tokens(80, shape.head_dim), 50,
                         std::to_string(shape.heads) + ":" + std::to_string(shape.kv_heads) + " heads of " +
                             std::to_string(shape.head_dim));
  }
}

TEST_F(CudaModelTest, ReturningTurnsSplitTheirKeysAndMatchTheCpuBackend) {
  // Returning turns: three sequences' new tokens over histories of 3000-5000 tokens in one
  // step, whose few query tiles split their keys across the SMs (kernels/attention/
  // prefill.h); with the split on and off and against the CPU backend.
  const ModelConfig c = Config();
  const std::vector<int> history{5000, 3000, 4500}, turn{40, 23, 9};
  ASSERT_GT(kernels::PrefillKeySplits({3, 72, 40, c.num_heads, c.num_kv_heads, c.head_dim, 5040}), 1)
      << "the shape this test is for no longer splits";
  auto turn_logits = [&](ModelBackend& m) {
    std::vector<std::vector<float>> logits(3, std::vector<float>(static_cast<size_t>(c.vocab_size)));
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    std::vector<ForwardEntry> step;
    for (int b = 0; b < 3; ++b) {
      tokens.push_back(Tokens(history[b] + turn[b], 5 + b));
      auto seq = m.NewSequence(history[b] + turn[b]);
      EXPECT_TRUE(seq.ok()) << seq.status();
      if (!seq.ok()) return logits;
      seqs.push_back(std::move(*seq));
      ForwardEntry first{seqs.back().get(), 0, absl::Span<const int32_t>(tokens[b].data(), history[b])};
      EXPECT_TRUE(m.Forward({&first, 1}).ok());
      step.push_back(ForwardEntry{seqs.back().get(), history[b],
                                  absl::Span<const int32_t>(tokens[b].data() + history[b], turn[b]),
                                  logits[b].data()});
    }
    EXPECT_TRUE(m.Forward(step).ok());
    return logits;
  };
  CpuModel cpu(ModelWeights::Random(c, 13, {}));
  const auto want = turn_logits(cpu);
  std::vector<std::vector<float>> got[2];
  for (int split = 0; split < 2; ++split) {
    CudaModelOptions o = SmallPool();
    o.prefill_key_splits = split;
    auto cuda = CudaModel::Create(ModelWeights::Random(c, 13, {}), o);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    got[split] = turn_logits(**cuda);
  }
  int agree = 0;  // top-1 as ExpectCudaMatchesCpu: bf16 may tip a near-tie
  for (int b = 0; b < 3; ++b) {
    for (int split = 0; split < 2; ++split) {
      EXPECT_LT(RelativeError(got[split][b], want[b]), 3e-2) << "sequence " << b << " split " << split;
      agree += Argmax(got[split][b]) == Argmax(want[b]);
    }
    EXPECT_LT(RelativeError(got[1][b], got[0][b]), 5e-3) << "sequence " << b << ": the parts merge to the unsplit";
  }
  EXPECT_GE(agree, 4) << "top-1 agreement with the CPU backend " << agree << "/6";
}

// A decode step whose rows differ in length splits them by their mean (Step::typical_tokens):
// one long row among many short ones, which the longest row's rule leaves one part (141 rows
// x 2 KV heads fill the SMs), goes in parts of the mean's bucket (1536 / 256: 6), and every
// row's answer stays within the merge's rounding (the attention's bf16 output mostly hides
// the split).
TEST_F(CudaModelTest, UnevenDecodeRowsAreSplitByTheirMean) {
  const ModelConfig c = Config();
  const int short_rows = 140, short_len = 40, long_len = 1500;
  std::vector<std::vector<float>> logits[2];
  int parts[2] = {0, 0};
  for (int uneven = 0; uneven < 2; ++uneven) {
    CudaModelOptions o = SmallPool();
    o.split_uneven_rows = uneven;
    auto model = CudaModel::Create(ModelWeights::Random(c, 31, {}), o);
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModel& m = **model;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    std::vector<std::vector<int32_t>> tokens;
    for (int b = 0; b <= short_rows; ++b) {
      const int len = b == 0 ? long_len : short_len;
      seqs.push_back(*m.NewSequence(len + 2));
      tokens.push_back(Tokens(len + 1, b));
      ForwardEntry e{seqs.back().get(), 0, absl::Span<const int32_t>(tokens.back().data(), len)};
      ASSERT_TRUE(m.Forward({&e, 1}).ok());
    }
    logits[uneven].assign(short_rows + 1, std::vector<float>(static_cast<size_t>(c.vocab_size)));
    std::vector<ForwardEntry> step;
    for (int b = 0; b <= short_rows; ++b) {
      const int len = b == 0 ? long_len : short_len;
      step.push_back(ForwardEntry{seqs[b].get(), len, absl::Span<const int32_t>(&tokens[b][len], 1),
                                  logits[uneven][b].data()});
    }
    ASSERT_TRUE(m.Forward(step).ok());
    parts[uneven] = kernels::LastDecodePartsForTesting();
  }
  EXPECT_LT(parts[0], parts[1]) << "the longest row's rule (one part on an H100)";
  EXPECT_EQ(parts[1], 6) << "the rows' mean did not reach the decode";
  for (int b = 0; b <= short_rows; ++b) {
    EXPECT_LT(RelativeError(logits[1][b], logits[0][b]), 5e-3) << "row " << b;
  }
}

// CudaModelOptions::decode_kernel reaches the decode: forced to the CUDA cores or the tensor
// cores, a decode step runs on that kernel, with the same logits within the tensor-core
// form's bf16 rounding of q.
TEST_F(CudaModelTest, DecodeKernelOptionPicksTheKernel) {
  const ModelConfig c = Config();
  std::vector<std::vector<float>> logits[2];
  bool on_tensor_cores[2] = {true, false};
  for (int tensor = 0; tensor < 2; ++tensor) {
    CudaModelOptions o = SmallPool();
    o.decode_kernel = tensor ? kernels::DecodeKernel::kTensorCores : kernels::DecodeKernel::kCudaCores;
    auto model = CudaModel::Create(ModelWeights::Random(c, 37, {}), o);
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModel& m = **model;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    std::vector<std::vector<int32_t>> tokens;
    const int rows = 8, len = 300;
    for (int b = 0; b < rows; ++b) {
      seqs.push_back(*m.NewSequence(len + 2));
      tokens.push_back(Tokens(len + 1, b));
      ForwardEntry e{seqs.back().get(), 0, absl::Span<const int32_t>(tokens.back().data(), len)};
      ASSERT_TRUE(m.Forward({&e, 1}).ok());
    }
    logits[tensor].assign(rows, std::vector<float>(static_cast<size_t>(c.vocab_size)));
    std::vector<ForwardEntry> step;
    for (int b = 0; b < rows; ++b) {
      step.push_back(ForwardEntry{seqs[b].get(), len, absl::Span<const int32_t>(&tokens[b][len], 1),
                                  logits[tensor][b].data()});
    }
    ASSERT_TRUE(m.Forward(step).ok());
    on_tensor_cores[tensor] = kernels::LastDecodeOnTensorCoresForTesting();
  }
  EXPECT_FALSE(on_tensor_cores[0]) << "decode_kernel = kCudaCores ran on the tensor cores";
  EXPECT_TRUE(on_tensor_cores[1]) << "decode_kernel = kTensorCores ran on the CUDA cores";
  for (size_t b = 0; b < logits[0].size(); ++b) {
    EXPECT_LT(RelativeError(logits[1][b], logits[0][b]), 5e-3) << "row " << b;
  }
}

// Decode steps run as captured graphs (per batch and context bucket) give the
// same tokens as the same steps launched one kernel at a time, across a bucket boundary.
TEST_F(CudaModelTest, GraphDecodeStepsEqualEagerSteps) {
  std::vector<int32_t> out[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    CudaModelOptions o = SmallPool();
    o.cuda_graphs = graphs;
    auto model = CudaModel::Create(ModelWeights::Random(Config(), 21, {}), o);
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModel& m = **model;
    const int prompt = 1000, steps = 40;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    std::vector<std::vector<int32_t>> tokens;
    for (int b = 0; b < 3; ++b) {
      seqs.push_back(*m.NewSequence(prompt + steps + 1));
      tokens.push_back(Tokens(prompt, b));
      int32_t next = -1;
      ForwardEntry e{seqs.back().get(), 0, tokens.back(), nullptr, &next};
      ASSERT_TRUE(m.Forward({&e, 1}).ok());
      tokens.back().push_back(next);
    }
    for (int s = 0; s < steps; ++s) {
      std::vector<int32_t> next(3, -1);
      std::vector<ForwardEntry> batch;
      for (int b = 0; b < 3; ++b) {
        const int64_t pos = static_cast<int64_t>(tokens[b].size()) - 1;
        batch.push_back(
            ForwardEntry{seqs[b].get(), pos, absl::Span<const int32_t>(&tokens[b][pos], 1), nullptr, &next[b]});
      }
      ASSERT_TRUE(m.Forward(batch).ok());
      for (int b = 0; b < 3; ++b) tokens[b].push_back(next[b]);
    }
    for (auto& t : tokens) out[graphs].insert(out[graphs].end(), t.begin() + prompt, t.end());
  }
  EXPECT_EQ(out[0], out[1]) << "graph-launched decode steps differ from eager ones";
}

// Decode steps of many sequences with tuned products: the model tuned every row count at
// start (so no step tunes, and waits, later), a step of 17..40 sequences runs its products
// for a multiple of 8 rows, and its logits equal the untuned model's within fp32 rounding
// carried through bf16 activations.
TEST_F(CudaModelTest, TunedDecodeStepsTuneNothingAndMatchUntuned) {
  const ModelWeights weights = ModelWeights::Random(Config(), 33, {});
  std::vector<std::vector<float>> logits[2];
  size_t tuned_after_start = 0;
  for (int tuned = 0; tuned < 2; ++tuned) {
    CudaModelOptions o = SmallPool();
    o.tune_matmuls = tuned;
    o.tuned_decode_rows = 40;
    auto model = CudaModel::Create(weights, o);
    ASSERT_TRUE(model.ok()) << model.status();
    CudaModel& m = **model;
    if (tuned) {
      tuned_after_start = kernels::TunedMatMuls().size();
      for (int rows : {3, 16, 24, 32, 40}) {  // the builtin model's products all take cuBLAS
        bool found = false;
        for (const kernels::MatMulTuning& t : kernels::TunedMatMuls()) found |= t.rows == rows;
        EXPECT_TRUE(found) << rows << " rows not tuned at start";
      }
    }
    for (int batch : {19, 25, 33, 40}) {
      std::vector<std::unique_ptr<SequenceState>> seqs;
      std::vector<std::vector<int32_t>> tokens;
      for (int b = 0; b < batch; ++b) {
        seqs.push_back(*m.NewSequence(40));
        tokens.push_back(Tokens(20 + b % 7, b));
        ForwardEntry e{seqs.back().get(), 0, tokens.back(), nullptr, nullptr};
        ASSERT_TRUE(m.Forward({&e, 1}).ok());
      }
      for (int step = 0; step < 3; ++step) {  // eager, captured, replayed
        std::vector<std::vector<float>> step_logits(static_cast<size_t>(batch),
                                                    std::vector<float>(static_cast<size_t>(Config().vocab_size)));
        std::vector<ForwardEntry> entries;
        std::vector<int32_t> next(static_cast<size_t>(batch));
        for (int b = 0; b < batch; ++b) {
          const int64_t pos = static_cast<int64_t>(tokens[b].size()) - 1;
          entries.push_back(ForwardEntry{seqs[b].get(), pos, absl::Span<const int32_t>(&tokens[b][pos], 1),
                                         step_logits[b].data(), &next[b]});
        }
        ASSERT_TRUE(m.Forward(entries).ok());
        for (int b = 0; b < batch; ++b) {
          tokens[b].push_back(17 + (b + step) % 50);  // fixed inputs: both models see the same
          logits[tuned].push_back(std::move(step_logits[b]));
        }
      }
    }
    if (tuned) EXPECT_EQ(kernels::TunedMatMuls().size(), tuned_after_start) << "a decode step tuned a product";
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  double worst = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) worst = std::max(worst, RelativeError(logits[1][i], logits[0][i]));
  EXPECT_LT(worst, 1e-2) << "tuned vs untuned decode logits";
  std::printf("tuned vs untuned decode logits: worst relative error %.3g over %zu rows\n", worst, logits[0].size());
}

TEST_F(CudaModelTest, PoolRunsOutAndRecovers) {
  CudaModelOptions o = SmallPool();
  o.kv_pool_bytes = 3 * 4 * 32 * 128 * 2 * 40;  // 40 pages of 32 tokens (4 layers, kv_dim 128, 3 planes)
  auto model = CudaModel::Create(ModelWeights::Random(Config(), 1, {}), o);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->pool_pages(), 40);
  auto a = (*model)->NewSequence(32 * 30);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(absl::IsResourceExhausted((*model)->NewSequence(32 * 11).status()));
  a->reset();
  EXPECT_TRUE((*model)->NewSequence(32 * 40).ok()) << "pages of an ended sequence come back";
}

// Sequences on a shared prefix (whole pages of it in their page lists, the rows of its last
// partial page copied into their own first page) give the logits of the prompt computed
// inline, batched with a plain sequence, for prefill and decode; the prefix's pages are never
// written and go back to the pool only with the last user.
TEST_F(CudaModelTest, SequencesOnASharedPrefixGiveTheInlineLogits) {
  ModelConfig c = Config();
  CudaModelOptions o = SmallPool();
  o.share_prefixes = true;
  ModelWeights weights = ModelWeights::Random(c, 13, {});
  auto model = CudaModel::Create(weights, o);
  ASSERT_TRUE(model.ok()) << model.status();
  CudaModel& m = **model;
  const int page = m.page_tokens();
  const std::vector<int32_t> system = Tokens(3 * page + 5, 1);  // 3 whole pages and 5 rows
  const int64_t shared = 3 * page;
  auto prefix_seq = m.NewSequence(static_cast<int64_t>(system.size()));
  ASSERT_TRUE(prefix_seq.ok());
  std::shared_ptr<SequenceState> prefix(std::move(*prefix_seq));
  ForwardEntry pe{prefix.get(), 0, system};
  ASSERT_TRUE(m.Forward({&pe, 1}).ok());
  const int64_t free_before = m.free_pages();
  EXPECT_TRUE(absl::IsInvalidArgument(
      m.NewSequenceOnPrefix(prefix, static_cast<int64_t>(system.size()) + 1, 8).status()))
      << "more than the prefix holds";
  // Sequence 0 on the whole prompt (its 5 last rows copied), sequence 1 on its whole pages
  // (computing the 5 rows with its own tokens). own[i]: what each feeds from `from[i]` on.
  std::vector<std::vector<int32_t>> own = {Tokens(7, 2), Tokens(page + 3, 3)};
  own[1].insert(own[1].begin(), system.begin() + shared, system.end());
  const int64_t from[2] = {static_cast<int64_t>(system.size()), shared};
  std::vector<std::unique_ptr<SequenceState>> seqs;
  for (int i = 0; i < 2; ++i) {
    auto sq = m.NewSequenceOnPrefix(prefix, from[i], static_cast<int64_t>(own[i].size()) + 4);
    ASSERT_TRUE(sq.ok()) << sq.status();
    seqs.push_back(std::move(*sq));
  }
  CpuModel cpu(std::move(weights));
  // The logits of the prompt's first `n` tokens and `tail` computed inline on the CPU.
  auto inline_logits = [&](int64_t n, const std::vector<int32_t>& tail) {
    std::vector<int32_t> all(system.begin(), system.begin() + n);
    all.insert(all.end(), tail.begin(), tail.end());
    auto seq = cpu.NewSequence(static_cast<int64_t>(all.size()));
    std::vector<float> logits(static_cast<size_t>(c.vocab_size));
    ForwardEntry e{seq->get(), 0, all, logits.data()};
    EXPECT_TRUE(cpu.Forward({&e, 1}).ok());
    return logits;
  };
  auto plain = m.NewSequence(16);
  const std::vector<int32_t> other = Tokens(9, 4);
  std::vector<std::vector<float>> logits(2, std::vector<float>(static_cast<size_t>(c.vocab_size)));
  std::vector<ForwardEntry> batch = {{seqs[0].get(), from[0], own[0], logits[0].data()},
                                     {seqs[1].get(), from[1], own[1], logits[1].data()},
                                     {plain->get(), 0, other}};
  ASSERT_TRUE(m.Forward(batch).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_LT(RelativeError(logits[i], inline_logits(from[i], own[i])), 3e-2) << "prefill of sequence " << i;
  }
  // A decode each.
  for (int i = 0; i < 2; ++i) {
    const std::vector<int32_t> next = {static_cast<int32_t>(40 + i)};
    ForwardEntry d{seqs[i].get(), from[i] + static_cast<int64_t>(own[i].size()), next, logits[i].data()};
    ASSERT_TRUE(m.Forward({&d, 1}).ok());
    own[i].push_back(next[0]);
    EXPECT_LT(RelativeError(logits[i], inline_logits(from[i], own[i])), 3e-2) << "decode of sequence " << i;
  }
  // Writing into the prefix is refused; the prefix's KV is unchanged (its own next token
  // still gives the inline logits).
  const std::vector<int32_t> t = {1};
  ForwardEntry inside{seqs[0].get(), shared - 1, t};
  EXPECT_TRUE(absl::IsInvalidArgument(m.Forward({&inside, 1})));
  ForwardEntry copied{seqs[0].get(), shared + 2, t};
  EXPECT_TRUE(absl::IsInvalidArgument(m.Forward({&copied, 1}))) << "the copied rows are the prefix's";
  // Only the sequences' own pages come back when they go; the prefix's with the prefix.
  seqs.clear();
  plain->reset();
  EXPECT_EQ(m.free_pages(), free_before) << "every own page back, the prefix's kept";
  prefix.reset();
  EXPECT_EQ(m.free_pages(), free_before + 4) << "the prefix's 4 pages back";
}

// Decodes of sequences on one prefix run as relay groups (the prefix read once per group):
// batched with sequences on a second prefix, a group of one and a plain sequence, each
// decode's logits equal the prompt computed inline within bf16; and decode steps with
// relay groups give the same tokens as graphs (captured, replayed across a context
// bucket) as eagerly. Every form: one fused launch, the system part on the model's second
// stream beside the decode (relay_beside_min_tokens 0), and the three launches chained on
// the step's stream (relay_chained_min_tokens 0: the decode a programmatic dependent of the
// system part on Hopper, ordinary launches elsewhere).
TEST_F(CudaModelTest, RelayDecodeGroupsGiveTheInlineLogitsAndGraphsEqualEager) {
  ModelConfig c = Config();
  ModelWeights weights = ModelWeights::Random(c, 31, {});
  CpuModel cpu(ModelWeights::Random(c, 31, {}));
  auto relay_form = [&](int64_t beside_min, int64_t chained_min) {
    const std::string form = chained_min == 0 ? "chained" : beside_min == 0 ? "system part beside" : "fused";
    std::vector<int32_t> tokens_of[2];
    for (int graphs = 0; graphs < 2; ++graphs) {
      CudaModelOptions o = SmallPool();
      o.share_prefixes = true;
      o.relay_attention = true;
      o.relay_min_saved_tokens = 0;  // every group of two or more
      o.relay_beside_min_tokens = beside_min;
      o.relay_chained_min_tokens = chained_min;
      o.cuda_graphs = graphs;
      auto model = CudaModel::Create(weights, o);
      ASSERT_TRUE(model.ok()) << model.status();
      CudaModel& m = **model;
      const int page = m.page_tokens();
      // Two prompts (8 and 3 pages) and the sequences on them: 4 on the first, 1 on the second,
      // and one plain sequence.
      std::vector<std::vector<int32_t>> systems = {Tokens(8 * page, 5), Tokens(3 * page, 6)};
      std::vector<std::shared_ptr<SequenceState>> prefixes;
      for (const auto& sys : systems) {
        std::shared_ptr<SequenceState> p(std::move(*m.NewSequence(static_cast<int64_t>(sys.size()))));
        ForwardEntry e{p.get(), 0, sys};
        ASSERT_TRUE(m.Forward({&e, 1}).ok());
        prefixes.push_back(std::move(p));
      }
      const int steps = 300;  // past a context bucket (256 own tokens)
      const std::vector<int> on = {0, 0, 0, 0, 1, -1};
      std::vector<std::unique_ptr<SequenceState>> seqs;
      std::vector<std::vector<int32_t>> own;  // each sequence's tokens after its prefix
      std::vector<int64_t> base;
      for (size_t i = 0; i < on.size(); ++i) {
        own.push_back(Tokens(5 + 3 * static_cast<int>(i), 10 + static_cast<int>(i)));
        const int64_t b = on[i] < 0 ? 0 : static_cast<int64_t>(systems[on[i]].size());
        base.push_back(b);
        auto sq = on[i] < 0
                      ? m.NewSequence(static_cast<int64_t>(own[i].size()) + steps + 1)
                      : m.NewSequenceOnPrefix(prefixes[on[i]], b, static_cast<int64_t>(own[i].size()) + steps + 1);
        ASSERT_TRUE(sq.ok()) << sq.status();
        seqs.push_back(std::move(*sq));
        int32_t next = -1;
        ForwardEntry e{seqs.back().get(), b, own[i], nullptr, &next};
        ASSERT_TRUE(m.Forward({&e, 1}).ok());
        own[i].push_back(next);
      }
      auto decode_batch = [&](std::vector<int32_t>* next, std::vector<std::vector<float>>* logits) {
        std::vector<ForwardEntry> batch;
        for (size_t i = 0; i < seqs.size(); ++i) {
          const int64_t pos = base[i] + static_cast<int64_t>(own[i].size()) - 1;
          batch.push_back(ForwardEntry{seqs[i].get(), pos, absl::Span<const int32_t>(&own[i].back(), 1),
                                       logits == nullptr ? nullptr : (*logits)[i].data(), &(*next)[i]});
        }
        return m.Forward(batch);
      };
      // One step with logits out (eager): every decode against the prompt computed inline.
      if (graphs == 0) {
        std::vector<int32_t> next(seqs.size(), -1);
        std::vector<std::vector<float>> logits(seqs.size(), std::vector<float>(static_cast<size_t>(c.vocab_size)));
        ASSERT_TRUE(decode_batch(&next, &logits).ok());
        for (size_t i = 0; i < seqs.size(); ++i) {
          std::vector<int32_t> all;
          if (on[i] >= 0) all = systems[on[i]];
          all.insert(all.end(), own[i].begin(), own[i].end());
          auto seq = cpu.NewSequence(static_cast<int64_t>(all.size()));
          std::vector<float> want(static_cast<size_t>(c.vocab_size));
          ForwardEntry e{seq->get(), 0, all, want.data()};
          ASSERT_TRUE(cpu.Forward({&e, 1}).ok());
          EXPECT_LT(RelativeError(logits[i], want), 3e-2) << form << ": decode of sequence " << i;
        }
      }
      for (int s = 0; s < steps - 1; ++s) {
        std::vector<int32_t> next(seqs.size(), -1);
        ASSERT_TRUE(decode_batch(&next, nullptr).ok());
        for (size_t i = 0; i < seqs.size(); ++i) own[i].push_back(next[i]);
      }
      for (const auto& t : own) tokens_of[graphs].insert(tokens_of[graphs].end(), t.end() - (steps - 1), t.end());
    }
    EXPECT_EQ(tokens_of[0], tokens_of[1]) << form << ": relay decode steps as graphs differ from eager ones";
  };
  relay_form(-1, kernels::kRelayChainedNever);
  relay_form(0, kernels::kRelayChainedNever);
  relay_form(-1, 0);
}

}  // namespace
}  // namespace strata::model
