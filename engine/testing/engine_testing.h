// Helpers for the engine's tests: collecting a turn's stream, a small model shape, and a
// CPU backend with a bounded KV memory (as a GPU pool is).
#ifndef STRATA_ENGINE_TESTING_ENGINE_TESTING_H_
#define STRATA_ENGINE_TESTING_ENGINE_TESTING_H_

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/metrics.h"
#include "base/prometheus_text.h"
#include "engine/engine.h"
#include "engine/turn.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"
#include "model/model_backend.h"
#include "storage/session_store.h"
#include "text/tokenizer.h"

namespace strata::engine::testing {

struct TurnOutput {
  std::vector<int32_t> tokens;
  std::string text;
  TurnResult result;
  absl::Status status;
};

inline TurnOutput Collect(std::shared_ptr<TurnStream> stream) {
  TurnOutput out;
  TurnStream::Event e;
  while (stream->Next(&e, absl::Seconds(60))) {
    out.tokens.insert(out.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    out.text += e.text;
    if (!e.error.ok()) out.status = e.error;
    if (e.done) out.result = *e.done;
  }
  return out;
}

// Submits the turns (all queued before any ends, when the engine is busy) and collects
// their outputs in order.
inline std::vector<TurnOutput> RunAll(Engine& engine, const std::vector<TurnRequest>& turns) {
  std::vector<std::shared_ptr<TurnStream>> streams;
  for (const TurnRequest& t : turns) {
    auto s = engine.Submit(t);
    if (!s.ok()) {
      auto failed = std::make_shared<TurnStream>();
      failed->Fail(s.status());
      streams.push_back(std::move(failed));
      continue;
    }
    streams.push_back(*s);
  }
  std::vector<TurnOutput> out;
  for (auto& s : streams) out.push_back(Collect(s));
  return out;
}

// A sample of `registry`'s exposition as a scrape of /metrics reads it (`name{label="v"}`);
// -1, and a test failure, when it is not exported.
inline double Exported(const metrics::Registry& registry, const std::string& key) {
  auto samples = metrics::ParsePrometheusText(registry.Serialize());
  EXPECT_TRUE(samples.ok()) << samples.status();
  if (!samples.ok()) return -1;
  auto it = samples->find(key);
  EXPECT_NE(it, samples->end()) << key << " is not exported";
  return it == samples->end() ? -1 : it->second;
}

// A counter's value in `registry` (0 when it was never incremented).
inline double Count(metrics::Registry& registry, const std::string& name, const metrics::Labels& labels) {
  return registry.AddCounter(name, "").WithLabels(labels).Value();
}

inline model::ModelConfig SmallConfig() {
  model::ModelConfig c = model::ModelConfig::Builtin();
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.max_context = 512;
  return c;
}

// A session store with a host tier only, laid out for `config` on the CPU backend.
inline std::unique_ptr<storage::SessionStore> HostOnlyStore(const model::ModelConfig& config, uint64_t fingerprint,
                                                            int64_t host_bytes = int64_t{64} << 20) {
  storage::SessionStoreOptions so;
  so.layout = Engine::ChunkLayoutFor(config, 16);
  so.host_capacity_bytes = host_bytes;
  so.model_fingerprint = fingerprint;
  return *storage::SessionStore::Create(so);
}

// A turn of session ("t", `session`): `messages` rendered by `tokenizer`.
inline TurnRequest ChatTurn(const text::Tokenizer& tokenizer, const std::string& session,
                            const std::vector<text::ChatMessage>& messages, int max_new) {
  TurnRequest r;
  r.key = {"t", session};
  r.prompt = *tokenizer.RenderChat(messages);
  r.max_new_tokens = max_new;
  return r;
}

// A CPU backend that test backends wrap: every call goes to the CpuModel inside; a test
// backend overrides only what it changes.
class CpuBackendWrapper : public model::ModelBackend {
 public:
  CpuBackendWrapper(std::unique_ptr<model::CpuModel> inner, std::string name)
      : inner_(std::move(inner)), name_(std::move(name)) {}
  const model::ModelConfig& config() const override { return inner_->config(); }
  std::string name() const override { return name_; }
  uint64_t fingerprint() const override { return inner_->fingerprint(); }
  int64_t kv_row_bytes() const override { return inner_->kv_row_bytes(); }
  absl::StatusOr<std::unique_ptr<model::SequenceState>> NewSequence(int64_t capacity) override {
    return inner_->NewSequence(capacity);
  }
  absl::Status ResizeSequence(model::SequenceState& seq, int64_t capacity) override {
    return inner_->ResizeSequence(seq, capacity);
  }
  bool shares_prefixes() const override { return inner_->shares_prefixes(); }
  absl::StatusOr<std::unique_ptr<model::SequenceState>> NewSequenceOnPrefix(
      std::shared_ptr<const model::SequenceState> prefix, int64_t prefix_tokens, int64_t capacity) override {
    return inner_->NewSequenceOnPrefix(std::move(prefix), prefix_tokens, capacity);
  }
  absl::Status Forward(absl::Span<const model::ForwardEntry> batch) override { return inner_->Forward(batch); }
  absl::Status LoadKv(model::SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                      const storage::ChunkLayout& layout) override {
    return inner_->LoadKv(seq, begin, count, payload, layout);
  }
  absl::Status LoadKvRows(model::SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                          const storage::ChunkLayout& layout, int first_row) override {
    return inner_->LoadKvRows(seq, begin, count, payload, layout, first_row);
  }
  absl::Status SaveKv(const model::SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                      const storage::ChunkLayout& layout) override {
    return inner_->SaveKv(seq, begin, count, payload, layout);
  }
  model::KvTransferStats kv_transfer_stats() const override { return inner_->kv_transfer_stats(); }

 protected:
  model::CpuModel& inner() { return *inner_; }

 private:
  std::unique_ptr<model::CpuModel> inner_;
  std::string name_;
};

// A CPU backend whose KV memory holds at most `limit` sequences and `max_tokens` tokens
// each, as a GPU pool does: NewSequence says ResourceExhausted past that. (Its sequences
// wrap the CPU model's, so it shares no prefixes.)
class LimitedBackend final : public CpuBackendWrapper {
 public:
  LimitedBackend(std::unique_ptr<model::CpuModel> inner, int limit, int64_t max_tokens, bool says_capacity = false)
      : CpuBackendWrapper(std::move(inner), "limited-cpu"), limit_(limit), max_tokens_(max_tokens),
        says_capacity_(says_capacity) {}
  int64_t kv_capacity_tokens() const override {
    return says_capacity_ ? max_tokens_ : model::ModelBackend::kv_capacity_tokens();
  }
  bool shares_prefixes() const override { return false; }
  absl::StatusOr<std::unique_ptr<model::SequenceState>> NewSequence(int64_t capacity) override {
    if (*live_ >= limit_ || capacity > max_tokens_) return absl::ResourceExhaustedError("KV memory is full");
    auto seq = inner().NewSequence(capacity);
    if (!seq.ok()) return seq.status();
    ++*live_;
    *peak_ = std::max(*peak_, *live_);
    return std::unique_ptr<model::SequenceState>(std::make_unique<Seq>(*std::move(seq), live_));
  }
  absl::Status ResizeSequence(model::SequenceState& seq, int64_t capacity) override {
    if (capacity > max_tokens_) return absl::ResourceExhaustedError("KV memory is full");
    return inner().ResizeSequence(*static_cast<Seq&>(seq).inner, capacity);
  }
  absl::Status Forward(absl::Span<const model::ForwardEntry> batch) override {
    std::vector<model::ForwardEntry> entries(batch.begin(), batch.end());
    for (model::ForwardEntry& e : entries) e.seq = static_cast<Seq*>(e.seq)->inner.get();
    return inner().Forward(entries);
  }
  absl::Status LoadKv(model::SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                      const storage::ChunkLayout& layout) override {
    return inner().LoadKv(*static_cast<Seq&>(seq).inner, begin, count, payload, layout);
  }
  absl::Status LoadKvRows(model::SequenceState& seq, int64_t begin, int count, absl::Span<const std::byte> payload,
                          const storage::ChunkLayout& layout, int first_row) override {
    return inner().LoadKvRows(*static_cast<Seq&>(seq).inner, begin, count, payload, layout, first_row);
  }
  absl::Status SaveKv(const model::SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                      const storage::ChunkLayout& layout) override {
    return inner().SaveKv(*static_cast<const Seq&>(seq).inner, begin, count, payload, layout);
  }
  std::shared_ptr<int> peak() const { return peak_; }
  // Saves then complete (their sequences free again) only once *release is set, as a GPU's
  // held-up write stream's do; without it, at once.
  void HoldSaves(std::shared_ptr<std::atomic<bool>> release) { release_ = std::move(release); }
  absl::StatusOr<uint64_t> MarkKvSaves() override { return ++marked_; }
  absl::StatusOr<bool> KvSavesDone(uint64_t) override { return release_ == nullptr || release_->load(); }
  absl::Status FinishKvSaves() override {
    while (release_ != nullptr && !release_->load()) absl::SleepFor(absl::Milliseconds(1));
    return absl::OkStatus();
  }

 private:
  struct Seq : model::SequenceState {
    Seq(std::unique_ptr<model::SequenceState> s, std::shared_ptr<int> live) : inner(std::move(s)), live(std::move(live)) {}
    ~Seq() override { --*live; }
    std::unique_ptr<model::SequenceState> inner;
    std::shared_ptr<int> live;
  };
  int limit_;
  int64_t max_tokens_;
  bool says_capacity_;
  std::shared_ptr<int> live_ = std::make_shared<int>(0);
  std::shared_ptr<int> peak_ = std::make_shared<int>(0);
  std::shared_ptr<std::atomic<bool>> release_;
  uint64_t marked_ = 0;
};

// A CPU backend whose every forward step takes at least `delay`.
class SlowBackend final : public CpuBackendWrapper {
 public:
  SlowBackend(std::unique_ptr<model::CpuModel> inner, absl::Duration delay)
      : CpuBackendWrapper(std::move(inner), "slow-cpu"), delay_(delay) {}
  absl::Status Forward(absl::Span<const model::ForwardEntry> batch) override {
    absl::SleepFor(delay_);
    return inner().Forward(batch);
  }

 private:
  const absl::Duration delay_;
};

// A CPU backend whose first Forward after arm() (from the start unless constructed
// disarmed) waits until the test opens the gate: the engine loop is then busy, and every
// turn submitted meanwhile stays queued.
class GatedBackend final : public CpuBackendWrapper {
 public:
  explicit GatedBackend(std::unique_ptr<model::CpuModel> inner, bool armed = true)
      : CpuBackendWrapper(std::move(inner), "gated-cpu"), armed_(armed) {}
  void arm() { armed_ = true; }
  absl::Status Forward(absl::Span<const model::ForwardEntry> batch) override {
    if (armed_) {
      if (!entered.HasBeenNotified()) entered.Notify();
      open.WaitForNotification();
    }
    return inner().Forward(batch);
  }
  absl::Notification entered, open;

 private:
  std::atomic<bool> armed_;
};

}  // namespace strata::engine::testing

#endif  // STRATA_ENGINE_TESTING_ENGINE_TESTING_H_
