// SequenceKv: the working KV of one sequence while it runs on the CPU backend.
//
// Holds, per layer, K after RoPE (what attention reads), K before RoPE (what the session
// cache stores: position-free) and V, each [capacity][kv_dim] fp32. Owned by the engine's
// running sequence; used by one thread at a time (the engine loop).
//
// A sequence on a shared prefix (a system prompt computed once) reads the prefix's KV for
// tokens [0, first()) and holds its own rows for tokens [first(), end()); the row accessors
// take a token's position in the whole sequence. The prefix is never written through it.
#ifndef STRATA_MODEL_CPU_SEQUENCE_KV_H_
#define STRATA_MODEL_CPU_SEQUENCE_KV_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "model/model_backend.h"

namespace strata::model {

class SequenceKv final : public SequenceState {
 public:
  SequenceKv(int layers, int kv_dim, int64_t capacity_tokens, std::shared_ptr<const SequenceKv> prefix = nullptr,
             int64_t prefix_tokens = 0)
      : layers_(layers), kv_dim_(kv_dim), capacity_(capacity_tokens), first_(prefix_tokens),
        prefix_(std::move(prefix)), k_rot_(Size()), k_raw_(Size()), v_(Size()) {}

  // Reallocates for `capacity_tokens` of its own, keeping the rows of the first min(old,
  // new) of them (and the prefix).
  void Resize(int64_t capacity_tokens) {
    const int64_t keep = std::min(capacity_, capacity_tokens);
    SequenceKv resized(layers_, kv_dim_, capacity_tokens, prefix_, first_);
    for (int l = 0; l < layers_; ++l) {
      const size_t from = Index(l, first_), to = resized.Index(l, first_), n = static_cast<size_t>(keep) * kv_dim_;
      std::copy_n(k_rot_.data() + from, n, resized.k_rot_.data() + to);
      std::copy_n(k_raw_.data() + from, n, resized.k_raw_.data() + to);
      std::copy_n(v_.data() + from, n, resized.v_.data() + to);
    }
    *this = std::move(resized);
  }

  int layers() const { return layers_; }
  int kv_dim() const { return kv_dim_; }
  // Tokens of its own it can hold.
  int64_t capacity() const { return capacity_; }
  // Its own tokens are [first(), end()); before them, the prefix's (first() is 0 without).
  int64_t first() const { return first_; }
  int64_t end() const { return first_ + capacity_; }
  const SequenceKv* prefix() const { return prefix_.get(); }

  // Rows of its own tokens, by position (first() <= token < end()).
  float* k_rot(int layer, int64_t token) { return k_rot_.data() + Index(layer, token); }
  float* k_raw(int layer, int64_t token) { return k_raw_.data() + Index(layer, token); }
  float* v(int layer, int64_t token) { return v_.data() + Index(layer, token); }
  const float* k_rot(int layer, int64_t token) const { return k_rot_.data() + Index(layer, token); }
  const float* k_raw(int layer, int64_t token) const { return k_raw_.data() + Index(layer, token); }
  const float* v(int layer, int64_t token) const { return v_.data() + Index(layer, token); }

 private:
  size_t Size() const { return static_cast<size_t>(layers_) * capacity_ * kv_dim_; }
  size_t Index(int layer, int64_t token) const {
    return (static_cast<size_t>(layer) * capacity_ + (token - first_)) * kv_dim_;
  }

  int layers_;
  int kv_dim_;
  int64_t capacity_;
  int64_t first_;
  std::shared_ptr<const SequenceKv> prefix_;
  std::vector<float> k_rot_;
  std::vector<float> k_raw_;
  std::vector<float> v_;
};

}  // namespace strata::model

#endif  // STRATA_MODEL_CPU_SEQUENCE_KV_H_
