#include "model/truncation_eval.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/rope/rope_cpu.h"
#include "model/perplexity.h"

namespace strata::model {
namespace {

// Rotates every K row of `payload` (fp32 or bf16 rows of the model's kv_dim) by `delta`
// positions: loaded at position p it then carries the rotation of p + delta, its old one.
void RotateStoredK(const ModelConfig& c, int64_t row_bytes, const storage::ChunkLayout& layout, int count, int delta,
                   absl::Span<std::byte> payload) {
  const std::vector<float> inv_freq = kernels::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling);
  const bool bf16 = row_bytes == int64_t{2} * c.kv_dim();
  std::vector<float> row(static_cast<size_t>(c.kv_dim()));
  const int32_t position = delta;
  for (int l = 0; l < c.num_layers; ++l) {
    for (int i = 0; i < count; ++i) {
      std::byte* at = payload.data() + layout.RowOffset(l, 0, i);
      if (bf16) {
        const auto* b = reinterpret_cast<const uint16_t*>(at);
        for (size_t j = 0; j < row.size(); ++j) row[j] = kernels::Bf16ToFloat(b[j]);
      } else {
        std::memcpy(row.data(), at, row.size() * sizeof(float));
      }
      kernels::ApplyRope(row.data(), &position, 1, c.num_kv_heads, c.head_dim, inv_freq.data());
      if (bf16) {
        auto* b = reinterpret_cast<uint16_t*>(at);
        for (size_t j = 0; j < row.size(); ++j) b[j] = kernels::FloatToBf16(row[j]);
      } else {
        std::memcpy(at, row.data(), row.size() * sizeof(float));
      }
    }
  }
}

struct Stream {
  absl::Span<const int32_t> tokens;  // its slice of the text
  int64_t next = 0;                  // the next token to feed
  int64_t held = 0;                  // tokens the sequence holds (positions 0..held)
  std::unique_ptr<SequenceState> seq;
};

}  // namespace

absl::StatusOr<TruncationEvalResult> StreamWithTruncation(ModelBackend& model, absl::Span<const int32_t> tokens,
                                                          TruncationMode mode, const TruncationEvalOptions& o) {
  const ModelConfig& c = model.config();
  if (o.window < 4 || o.window > c.max_context || !(o.keep > 0 && o.keep < 1) || o.streams < 1) {
    return absl::InvalidArgumentError(absl::StrCat("window ", o.window, " (4..", c.max_context, "), keep ", o.keep,
                                                   " (between 0 and 1), streams ", o.streams, " (>= 1)"));
  }
  if (absl::Status s = c.CheckTokens(tokens); !s.ok()) return s;
  const int64_t slice = static_cast<int64_t>(tokens.size()) / o.streams;
  if (slice < o.window + 2) {
    return absl::InvalidArgumentError(absl::StrCat(tokens.size(), " tokens over ", o.streams, " streams: each needs ",
                                                   o.window + 2, " to truncate once"));
  }
  const int kept = std::max(1, static_cast<int>(std::lround(o.window * o.keep)));
  const storage::ChunkLayout layout = ChunkLayoutFor(model, kept);
  std::vector<std::byte> payload(static_cast<size_t>(layout.PayloadBytes()));

  // Each stream starts with its first `window` tokens in one prefill (not scored).
  std::vector<Stream> streams(static_cast<size_t>(o.streams));
  std::vector<ForwardEntry> batch;
  for (int s = 0; s < o.streams; ++s) {
    Stream& st = streams[static_cast<size_t>(s)];
    st.tokens = tokens.subspan(static_cast<size_t>(s * slice), static_cast<size_t>(slice));
    auto seq = model.NewSequence(o.window);
    if (!seq.ok()) return seq.status();
    st.seq = *std::move(seq);
    batch.push_back({st.seq.get(), 0, st.tokens.first(static_cast<size_t>(o.window))});
    st.next = st.held = o.window;
  }
  if (absl::Status s = model.Forward(batch); !s.ok()) return s;

  TruncationEvalResult result;
  std::vector<std::vector<float>> logits(streams.size(), std::vector<float>(static_cast<size_t>(c.vocab_size)));
  for (;;) {
    // Truncate the full sequences: the newest `kept` tokens go on at positions 0..kept.
    for (Stream& st : streams) {
      if (st.held < o.window) continue;
      const int64_t drop = st.held - kept;
      auto fresh = model.NewSequence(o.window);
      if (!fresh.ok()) return fresh.status();
      if (mode == TruncationMode::kRecompute) {
        ForwardEntry e{fresh->get(), 0, st.tokens.subspan(static_cast<size_t>(st.next - kept), kept)};
        if (absl::Status s = model.Forward({&e, 1}); !s.ok()) return s;
      } else {
        if (absl::Status s = model.SaveKv(*st.seq, drop, kept, absl::MakeSpan(payload), layout); !s.ok()) return s;
        if (absl::Status s = model.FinishKvSaves(); !s.ok()) return s;
        if (mode == TruncationMode::kNoReRotation) {
          RotateStoredK(c, layout.row_bytes, layout, kept, static_cast<int>(drop), absl::MakeSpan(payload));
        }
        if (absl::Status s = model.LoadKv(**fresh, 0, kept, payload, layout); !s.ok()) return s;
        if (absl::Status s = model.FinishKvTransfers(); !s.ok()) return s;
      }
      st.seq = *std::move(fresh);
      st.held = kept;
      ++result.truncations;
    }
    // One decode step for every stream with a token left to feed and one to predict.
    batch.clear();
    std::vector<size_t> stepped;
    for (size_t i = 0; i < streams.size(); ++i) {
      Stream& st = streams[i];
      if (st.next + 1 >= static_cast<int64_t>(st.tokens.size())) continue;
      batch.push_back({st.seq.get(), st.held, st.tokens.subspan(static_cast<size_t>(st.next), 1), logits[i].data()});
      stepped.push_back(i);
    }
    if (batch.empty()) break;
    if (absl::Status s = model.Forward(batch); !s.ok()) return s;
    for (size_t i : stepped) {
      Stream& st = streams[i];
      result.nll_nats += NegativeLogLikelihood(logits[i], st.tokens[static_cast<size_t>(st.next + 1)]);
      ++result.scored_tokens;
      ++st.next;
      ++st.held;
    }
  }
  return result;
}

}  // namespace strata::model
