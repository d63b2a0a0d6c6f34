// Sequences on a shared prefix (a system prompt computed once) on the CPU backend: the
// same logits and KV as the prompt computed inline, alone or batched with others.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "model/cpu/cpu_model.h"
#include "model/model_config.h"
#include "model/testing/tiny_config.h"
#include "model/model_weights.h"
#include "storage/chunk_format.h"
#include "gtest/gtest.h"

namespace strata::model {
namespace {

using testing::TinyConfig;

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 37 + 11 * salt + 5) % 256;
  return p;
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

class SharedPrefixTest : public ::testing::Test {
 protected:
  SharedPrefixTest() : c_(TinyConfig()), model_(ModelWeights::Random(c_, 3, {})) {}

  // The prefix computed on a sequence of its own.
  std::shared_ptr<SequenceState> Prefix(const std::vector<int32_t>& tokens) {
    auto seq = model_.NewSequence(static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(seq.ok());
    ForwardEntry e{seq->get(), 0, tokens};
    EXPECT_TRUE(model_.Forward({&e, 1}).ok());
    return std::shared_ptr<SequenceState>(std::move(*seq));
  }
  // Logits of the last token of prefix + own, computed inline on a plain sequence.
  std::vector<float> Inline(const std::vector<int32_t>& prefix, const std::vector<int32_t>& own) {
    std::vector<int32_t> all(prefix);
    all.insert(all.end(), own.begin(), own.end());
    auto seq = model_.NewSequence(static_cast<int64_t>(all.size()));
    std::vector<float> logits(c_.vocab_size);
    ForwardEntry e{seq->get(), 0, all, logits.data()};
    EXPECT_TRUE(model_.Forward({&e, 1}).ok());
    return logits;
  }

  ModelConfig c_;
  CpuModel model_;
};

TEST_F(SharedPrefixTest, PrefillAndDecodeOnAPrefixEqualTheInlinePrompt) {
  const std::vector<int32_t> sys = Tokens(40, 1);
  std::shared_ptr<SequenceState> prefix = Prefix(sys);
  // Three sequences on the prefix and one plain bystander, stepped together: prefill
  // chunks of different lengths, then decodes.
  std::vector<std::vector<int32_t>> own = {Tokens(7, 2), Tokens(1, 3), Tokens(19, 4)};
  std::vector<std::unique_ptr<SequenceState>> seqs;
  for (size_t i = 0; i < own.size(); ++i) {
    auto s = model_.NewSequenceOnPrefix(prefix, 40, 32);
    ASSERT_TRUE(s.ok()) << s.status();
    seqs.push_back(std::move(*s));
  }
  auto bystander = model_.NewSequence(32);
  const std::vector<int32_t> other = Tokens(9, 5);
  std::vector<std::vector<float>> logits(own.size(), std::vector<float>(c_.vocab_size));
  std::vector<ForwardEntry> batch;
  for (size_t i = 0; i < own.size(); ++i) batch.push_back({seqs[i].get(), 40, own[i], logits[i].data()});
  batch.push_back({bystander->get(), 0, other});
  ASSERT_TRUE(model_.Forward(batch).ok());
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_LE(MaxDiff(logits[i], Inline(sys, own[i])), 1e-5) << "sequence " << i;
  }
  // A decode step on each: the token at the next position.
  batch.clear();
  std::vector<std::vector<int32_t>> next = {{17}, {18}, {19}};
  for (size_t i = 0; i < own.size(); ++i) {
    batch.push_back({seqs[i].get(), 40 + static_cast<int64_t>(own[i].size()), next[i], logits[i].data()});
  }
  ASSERT_TRUE(model_.Forward(batch).ok());
  for (size_t i = 0; i < own.size(); ++i) {
    std::vector<int32_t> grown = own[i];
    grown.push_back(next[i][0]);
    EXPECT_LE(MaxDiff(logits[i], Inline(sys, grown)), 1e-5) << "decode of sequence " << i;
  }
}

TEST_F(SharedPrefixTest, AShorterPrefixOfTheSameSequenceIsItsOwnGroup) {
  const std::vector<int32_t> sys = Tokens(30, 1);
  std::shared_ptr<SequenceState> prefix = Prefix(sys);
  auto whole = model_.NewSequenceOnPrefix(prefix, 30, 8);
  auto part = model_.NewSequenceOnPrefix(prefix, 20, 8);
  ASSERT_TRUE(whole.ok() && part.ok());
  const std::vector<int32_t> own = Tokens(5, 9);
  std::vector<float> a(c_.vocab_size), b(c_.vocab_size);
  ForwardEntry batch[2] = {{whole->get(), 30, own, a.data()}, {part->get(), 20, own, b.data()}};
  ASSERT_TRUE(model_.Forward(batch).ok());
  EXPECT_LE(MaxDiff(a, Inline(sys, own)), 1e-5);
  EXPECT_LE(MaxDiff(b, Inline(std::vector<int32_t>(sys.begin(), sys.begin() + 20), own)), 1e-5);
}

// Stored KV of a prefixed sequence is its own tokens' (position-free): saved at positions
// past the prefix and loaded into another sequence on the prefix, it gives the same logits.
TEST_F(SharedPrefixTest, SavedOwnKvLoadsBackAtItsPositions) {
  const std::vector<int32_t> sys = Tokens(24, 1);
  std::shared_ptr<SequenceState> prefix = Prefix(sys);
  const std::vector<int32_t> own = Tokens(10, 2);
  auto first = model_.NewSequenceOnPrefix(prefix, 24, 16);
  ForwardEntry e{first->get(), 24, own};
  ASSERT_TRUE(model_.Forward({&e, 1}).ok());
  const storage::ChunkLayout layout = ChunkLayoutFor(model_, 16);
  std::vector<std::byte> payload(static_cast<size_t>(layout.PayloadBytes()));
  ASSERT_TRUE(model_.SaveKv(**first, 24, 10, absl::MakeSpan(payload), layout).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(model_.SaveKv(**first, 20, 4, absl::MakeSpan(payload), layout)))
      << "rows inside the prefix are not the sequence's to save";

  auto second = model_.NewSequenceOnPrefix(prefix, 24, 16);
  ASSERT_TRUE(model_.LoadKv(**second, 24, 10, payload, layout).ok());
  const std::vector<int32_t> next = {42};
  std::vector<float> logits(c_.vocab_size);
  ForwardEntry d{second->get(), 34, next, logits.data()};
  ASSERT_TRUE(model_.Forward({&d, 1}).ok());
  std::vector<int32_t> grown = own;
  grown.push_back(42);
  EXPECT_LE(MaxDiff(logits, Inline(sys, grown)), 1e-5);
  // Resizing keeps the prefix and the own rows.
  ASSERT_TRUE(model_.ResizeSequence(**second, 40).ok());
  ForwardEntry d2{second->get(), 35, next, logits.data()};
  ASSERT_TRUE(model_.Forward({&d2, 1}).ok());
  grown.push_back(42);
  EXPECT_LE(MaxDiff(logits, Inline(sys, grown)), 1e-5);
}

TEST_F(SharedPrefixTest, BadPrefixesAndPositionsAreRefused) {
  std::shared_ptr<SequenceState> prefix = Prefix(Tokens(10, 1));
  EXPECT_TRUE(absl::IsInvalidArgument(model_.NewSequenceOnPrefix(prefix, 11, 4).status())) << "past the prefix";
  EXPECT_TRUE(absl::IsInvalidArgument(model_.NewSequenceOnPrefix(prefix, 0, 4).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(model_.NewSequenceOnPrefix(prefix, 10, 247).status())) << "past the context";
  auto on = model_.NewSequenceOnPrefix(prefix, 10, 4);
  ASSERT_TRUE(on.ok());
  std::shared_ptr<SequenceState> shared_on(std::move(*on));
  EXPECT_TRUE(absl::IsInvalidArgument(model_.NewSequenceOnPrefix(shared_on, 5, 4).status())) << "a prefix on a prefix";
  const std::vector<int32_t> t = {1, 2};
  ForwardEntry inside{shared_on.get(), 9, t};
  EXPECT_TRUE(absl::IsInvalidArgument(model_.Forward({&inside, 1}))) << "writing into the prefix";
  ForwardEntry past{shared_on.get(), 13, t};
  EXPECT_TRUE(absl::IsInvalidArgument(model_.Forward({&past, 1})));
}

}  // namespace
}  // namespace strata::model
