#include "model/cpu/cpu_model.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/attention/attention_cpu.h"
#include "kernels/attention/relay_cpu.h"
#include "kernels/elementwise/elementwise_cpu.h"
#include "kernels/gemm/gemm_cpu.h"
#include "kernels/norm/norm_cpu.h"
#include "kernels/rope/rope_cpu.h"
#include "kernels/sampling/sampling_cpu.h"

namespace strata::model {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

CpuModel::CpuModel(ModelWeights weights)
    : weights_(std::move(weights)),
      inv_freq_(kernels::RopeInvFreq(weights_.config().head_dim, weights_.config().rope_theta,
                                     weights_.config().rope_scaling)) {}

void CpuModel::PlaceLoadedKv(SequenceKv& kv, int layer, int64_t pos, const float* k_raw,
                             const float* v) const {
  const ModelConfig& c = config();
  const size_t bytes = static_cast<size_t>(c.kv_dim()) * sizeof(float);
  std::memcpy(kv.k_raw(layer, pos), k_raw, bytes);
  std::memcpy(kv.v(layer, pos), v, bytes);
  float* k = kv.k_rot(layer, pos);
  std::memcpy(k, k_raw, bytes);
  const int32_t p = static_cast<int32_t>(pos);
  kernels::ApplyRope(k, &p, 1, c.num_kv_heads, c.head_dim, inv_freq_.data());
}

absl::StatusOr<std::unique_ptr<SequenceState>> CpuModel::NewSequence(int64_t capacity_tokens) {
  if (capacity_tokens <= 0 || capacity_tokens > config().max_context) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", capacity_tokens, " tokens does not fit the context of ",
                                                   config().max_context));
  }
  return std::make_unique<SequenceKv>(config().num_layers, config().kv_dim(), capacity_tokens);
}

absl::StatusOr<std::unique_ptr<SequenceState>> CpuModel::NewSequenceOnPrefix(
    std::shared_ptr<const SequenceState> prefix, int64_t prefix_tokens, int64_t capacity_tokens) {
  auto kv = std::dynamic_pointer_cast<const SequenceKv>(prefix);
  if (kv == nullptr) return absl::InvalidArgumentError("a prefix of another backend");
  if (kv->prefix() != nullptr || kv->first() != 0) return absl::InvalidArgumentError("a prefix on a prefix");
  if (prefix_tokens <= 0 || prefix_tokens > kv->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a prefix of ", prefix_tokens, " tokens from a sequence of ", kv->end()));
  }
  if (capacity_tokens <= 0 || prefix_tokens + capacity_tokens > config().max_context) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", prefix_tokens, " + ", capacity_tokens,
                                                   " tokens does not fit the context of ", config().max_context));
  }
  return std::make_unique<SequenceKv>(config().num_layers, config().kv_dim(), capacity_tokens, std::move(kv),
                                      prefix_tokens);
}

absl::Status CpuModel::ResizeSequence(SequenceState& seq, int64_t capacity_tokens) {
  auto* kv = dynamic_cast<SequenceKv*>(&seq);
  if (kv == nullptr) return absl::InvalidArgumentError("a sequence of another backend");
  if (capacity_tokens <= 0 || kv->first() + capacity_tokens > config().max_context) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", kv->first() + capacity_tokens,
                                                   " tokens does not fit the context of ", config().max_context));
  }
  kv->Resize(capacity_tokens);
  return absl::OkStatus();
}

namespace {

absl::Status CheckRows(const ModelBackend& m, const SequenceKv& kv, int64_t begin, int count, size_t payload_bytes,
                       const storage::ChunkLayout& layout, int first_row = 0) {
  if (layout.layers != m.config().num_layers || layout.row_bytes != m.kv_row_bytes() || count < 0 ||
      first_row < 0 || first_row + count > layout.chunk_tokens || begin < kv.first() || begin + count > kv.end() ||
      static_cast<int64_t>(payload_bytes) < layout.PayloadBytes()) {
    return absl::InvalidArgumentError("stored KV rows do not fit this model or sequence");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuModel::LoadKv(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                              const storage::ChunkLayout& layout) {
  return LoadKvRows(seq, begin, count, payload, layout, 0);
}

absl::Status CpuModel::LoadKvRows(SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                                  const storage::ChunkLayout& layout, int first_row) {
  auto* kv = dynamic_cast<SequenceKv*>(&seq);
  if (kv == nullptr) return absl::InvalidArgumentError("a sequence of another backend");
  if (absl::Status s = CheckRows(*this, *kv, begin, count, payload.size(), layout, first_row); !s.ok()) return s;
  for (int i = 0; i < count; ++i) {
    for (int l = 0; l < config().num_layers; ++l) {
      const auto* k = reinterpret_cast<const float*>(payload.data() + layout.RowOffset(l, 0, first_row + i));
      const auto* v = reinterpret_cast<const float*>(payload.data() + layout.RowOffset(l, 1, first_row + i));
      PlaceLoadedKv(*kv, l, begin + i, k, v);
    }
  }
  load_bytes_.fetch_add(int64_t{2} * count * config().num_layers * layout.row_bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status CpuModel::SaveKv(const SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                              const storage::ChunkLayout& layout) {
  const auto* kv = dynamic_cast<const SequenceKv*>(&seq);
  if (kv == nullptr) return absl::InvalidArgumentError("a sequence of another backend");
  if (absl::Status s = CheckRows(*this, *kv, begin, count, payload.size(), layout); !s.ok()) return s;
  const size_t row = static_cast<size_t>(layout.row_bytes);
  for (int l = 0; l < config().num_layers; ++l) {
    for (int i = 0; i < count; ++i) {
      std::memcpy(payload.data() + layout.RowOffset(l, 0, i), kv->k_raw(l, begin + i), row);
      std::memcpy(payload.data() + layout.RowOffset(l, 1, i), kv->v(l, begin + i), row);
    }
  }
  save_bytes_.fetch_add(int64_t{2} * count * config().num_layers * layout.row_bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

KvTransferStats CpuModel::kv_transfer_stats() const {
  KvTransferStats s;
  s.load_bytes = load_bytes_.load(std::memory_order_relaxed);
  s.save_bytes = save_bytes_.load(std::memory_order_relaxed);
  return s;
}

absl::Status CpuModel::Forward(absl::Span<const ForwardEntry> batch) {
  const ModelConfig& c = config();
  const int hidden = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  int64_t rows = 0;
  std::vector<SequenceKv*> kvs;
  kvs.reserve(batch.size());
  for (const ForwardEntry& e : batch) {
    auto* kv = dynamic_cast<SequenceKv*>(e.seq);
    if (kv == nullptr) return absl::InvalidArgumentError("a sequence of another backend");
    if (e.start_pos < kv->first() || e.start_pos + static_cast<int64_t>(e.tokens.size()) > kv->end()) {
      return absl::InvalidArgumentError(e.start_pos < kv->first() ? "tokens inside the sequence's shared prefix"
                                                                 : "tokens past the sequence's capacity");
    }
    kvs.push_back(kv);
    rows += static_cast<int64_t>(e.tokens.size());
  }
  if (rows == 0) return absl::OkStatus();
  Grow(x_, rows * hidden);
  Grow(h_, rows * hidden);
  Grow(q_, rows * qd);
  Grow(k_, rows * kvd);
  Grow(v_, rows * kvd);
  Grow(attn_, rows * qd);
  Grow(proj_, rows * hidden);
  Grow(gate_, rows * ffn);
  Grow(up_, rows * ffn);
  positions_.clear();
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(rows));
  for (const ForwardEntry& e : batch) {
    for (size_t i = 0; i < e.tokens.size(); ++i) {
      ids.push_back(e.tokens[i]);
      positions_.push_back(static_cast<int32_t>(e.start_pos + static_cast<int64_t>(i)));
    }
  }
  const int r = static_cast<int>(rows);
  float* x = x_.data();
  kernels::Embed(weights_.embedding(), ids.data(), r, hidden, x);

  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights_.layer(l);
    // Attention block.
    kernels::RmsNorm(x, w.attn_norm, h_.data(), r, hidden, c.rms_norm_eps);
    kernels::MatMulWT(h_.data(), w.wq, w.bq, q_.data(), r, hidden, qd);
    kernels::MatMulWT(h_.data(), w.wk, w.bk, k_.data(), r, hidden, kvd);
    kernels::MatMulWT(h_.data(), w.wv, w.bv, v_.data(), r, hidden, kvd);
    if (w.q_norm != nullptr) {  // Qwen3: each head of q and k normed on its own
      kernels::RmsNorm(q_.data(), w.q_norm, q_.data(), r * c.num_heads, c.head_dim, c.rms_norm_eps);
      kernels::RmsNorm(k_.data(), w.k_norm, k_.data(), r * c.num_kv_heads, c.head_dim, c.rms_norm_eps);
    }
    // K before RoPE is what the session cache keeps; then rotate q and k in place.
    int64_t row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const ForwardEntry& e = batch[b];
      for (size_t i = 0; i < e.tokens.size(); ++i, ++row) {
        int64_t pos = e.start_pos + static_cast<int64_t>(i);
        std::memcpy(kvs[b]->k_raw(l, pos), k_.data() + row * kvd, kvd * sizeof(float));
        std::memcpy(kvs[b]->v(l, pos), v_.data() + row * kvd, kvd * sizeof(float));
      }
    }
    kernels::ApplyRope(q_.data(), positions_.data(), r, c.num_heads, c.head_dim, inv_freq_.data());
    kernels::ApplyRope(k_.data(), positions_.data(), r, c.num_kv_heads, c.head_dim, inv_freq_.data());
    row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const ForwardEntry& e = batch[b];
      const int n = static_cast<int>(e.tokens.size());
      for (int i = 0; i < n; ++i) {
        std::memcpy(kvs[b]->k_rot(l, e.start_pos + i), k_.data() + (row + i) * kvd, kvd * sizeof(float));
      }
      row += n;
    }
    Attend(batch, kvs, l);
    kernels::MatMulWT(attn_.data(), w.wo, nullptr, proj_.data(), r, qd, hidden);
    AddInPlace(x, proj_.data(), rows * hidden);
    // MLP block.
    kernels::RmsNorm(x, w.mlp_norm, h_.data(), r, hidden, c.rms_norm_eps);
    kernels::MatMulWT(h_.data(), w.w_gate, nullptr, gate_.data(), r, hidden, ffn);
    kernels::MatMulWT(h_.data(), w.w_up, nullptr, up_.data(), r, hidden, ffn);
    kernels::SwiGlu(gate_.data(), up_.data(), gate_.data(), rows * ffn);
    kernels::MatMulWT(gate_.data(), w.w_down, nullptr, proj_.data(), r, ffn, hidden);
    AddInPlace(x, proj_.data(), rows * hidden);
  }

  // Logits only for the rows that need them (the last token of an entry).
  int64_t row = 0;
  for (const ForwardEntry& e : batch) {
    row += static_cast<int64_t>(e.tokens.size());
    if (e.logits == nullptr && e.token == nullptr) continue;
    float* last = h_.data();
    kernels::RmsNorm(x + (row - 1) * hidden, weights_.final_norm(), last, 1, hidden, c.rms_norm_eps);
    float* logits = e.logits;
    if (logits == nullptr) {
      Grow(logits_, c.vocab_size);
      logits = logits_.data();
    }
    kernels::MatMulWT(last, weights_.lm_head(), nullptr, logits, 1, hidden, c.vocab_size);
    if (e.token != nullptr) {
      *e.token = kernels::SampleToken(logits, c.vocab_size, e.sampling.temperature, e.sampling.top_p, e.sampling.u);
    }
  }
  return absl::OkStatus();
}

void CpuModel::Attend(absl::Span<const ForwardEntry> batch, const std::vector<SequenceKv*>& kvs, int layer) {
  const ModelConfig& c = config();
  const int qd = c.q_dim(), kvd = c.kv_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<int64_t> first_row(batch.size());
  int64_t rows = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    first_row[b] = rows;
    rows += static_cast<int64_t>(batch[b].tokens.size());
  }
  std::vector<bool> done(batch.size(), false);
  for (size_t b = 0; b < batch.size(); ++b) {
    if (done[b]) continue;
    const SequenceKv* prefix = kvs[b]->prefix();
    if (prefix == nullptr) {
      // A sequence of its own: plain causal attention over its rows.
      const ForwardEntry& e = batch[b];
      kernels::AttentionParams p{};
      p.q = q_.data() + first_row[b] * qd;
      p.k = kvs[b]->k_rot(layer, 0);
      p.v = kvs[b]->v(layer, 0);
      p.out = attn_.data() + first_row[b] * qd;
      p.num_queries = static_cast<int>(e.tokens.size());
      p.num_heads = c.num_heads;
      p.num_kv_heads = c.num_kv_heads;
      p.head_dim = c.head_dim;
      p.kv_row_stride = kvd;
      p.first_query_pos = static_cast<int>(e.start_pos);
      p.scale = scale;
      kernels::Attention(p);
      done[b] = true;
      continue;
    }
    // Every sequence of the step on this prefix: their query rows gathered, the prefix
    // read once for all of them. Sequences may share a prefix up to different lengths
    // (first()); each length is its own group.
    std::vector<size_t> group;
    for (size_t g = b; g < batch.size(); ++g) {
      if (!done[g] && kvs[g]->prefix() == prefix && kvs[g]->first() == kvs[b]->first()) group.push_back(g);
    }
    std::vector<kernels::RelaySequence> seqs;
    int64_t group_rows = 0;
    for (size_t g : group) {
      const ForwardEntry& e = batch[g];
      const int n = static_cast<int>(e.tokens.size());
      seqs.push_back(kernels::RelaySequence{group_rows, n, kvs[g]->k_rot(layer, kvs[g]->first()),
                                            kvs[g]->v(layer, kvs[g]->first()),
                                            static_cast<int>(e.start_pos - kvs[g]->first())});
      group_rows += n;
    }
    Grow(relay_q_, group_rows * qd);
    Grow(relay_out_, group_rows * qd);
    for (size_t i = 0; i < group.size(); ++i) {
      std::memcpy(relay_q_.data() + seqs[i].first_row * qd, q_.data() + first_row[group[i]] * qd,
                  static_cast<size_t>(seqs[i].num_queries) * qd * sizeof(float));
    }
    kernels::RelayAttentionParams p{};
    p.q = relay_q_.data();
    p.out = relay_out_.data();
    p.prefix_k = prefix->k_rot(layer, 0);
    p.prefix_v = prefix->v(layer, 0);
    p.prefix_len = static_cast<int>(kvs[b]->first());
    p.seqs = seqs.data();
    p.num_seqs = static_cast<int>(seqs.size());
    p.num_heads = c.num_heads;
    p.num_kv_heads = c.num_kv_heads;
    p.head_dim = c.head_dim;
    p.kv_row_stride = kvd;
    p.scale = scale;
    kernels::RelayAttention(p);
    for (size_t i = 0; i < group.size(); ++i) {
      std::memcpy(attn_.data() + first_row[group[i]] * qd, relay_out_.data() + seqs[i].first_row * qd,
                  static_cast<size_t>(seqs[i].num_queries) * qd * sizeof(float));
      done[group[i]] = true;
    }
  }
}

}  // namespace strata::model
