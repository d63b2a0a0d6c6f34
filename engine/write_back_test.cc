// Asynchronous write-back, on a CPU backend whose saves complete only when the test says
// (as a GPU's write stream completes later): the batch goes on while a turn's KV is on its
// way to the host tier, the session is not served from chunks not yet filled, its next
// turn runs on the sequence at once when it extends every saved token (else it waits for
// that session's copy alone), and a failed copy drops the session (the next turn
// recomputes and answers the same).
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_model.h"

namespace strata::engine {
namespace {

using testing::ChatTurn;
using testing::Collect;
using testing::HostOnlyStore;
using testing::SmallConfig;
using testing::TurnOutput;

// Saves are recorded, and copied only once `release` is set (a poll of the ticket then
// lands them; FinishKvSaves waits for `release`, up to 30 s); `fail` makes the poll report
// a device fault instead.
class LateSavesBackend final : public testing::CpuBackendWrapper {
 public:
  struct Control {
    std::atomic<bool> release{false};
    std::atomic<bool> fail{false};
    std::atomic<int> polled_not_done{0};
  };
  LateSavesBackend(std::unique_ptr<model::CpuModel> inner, std::shared_ptr<Control> control)
      : CpuBackendWrapper(std::move(inner), "late-saves-cpu"), control_(std::move(control)) {}
  absl::Status SaveKv(const model::SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                      const storage::ChunkLayout& layout) override {
    // The payload is garbage until the copy lands.
    std::fill(payload.begin(), payload.end(), std::byte{0xee});
    pending_.push_back(Pending{&seq, begin, count, payload, layout, 0});
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> MarkKvSaves() override {
    ++marked_;
    for (Pending& p : pending_) {
      if (p.ticket == 0) p.ticket = marked_;
    }
    return marked_;
  }
  absl::StatusOr<bool> KvSavesDone(uint64_t ticket) override {
    if (control_->fail) return absl::InternalError("the write stream faulted");
    if (!control_->release) {
      ++control_->polled_not_done;
      return ticket <= done_;
    }
    return Land(ticket).ok() && ticket <= done_;
  }
  absl::Status FinishKvSaves() override {
    if (control_->fail) return absl::InternalError("the write stream faulted");
    // Waiting for the stream: the copies land when the test releases them.
    for (int i = 0; i < 30000 && !control_->release; ++i) absl::SleepFor(absl::Milliseconds(1));
    return Land(marked_);
  }
  absl::Status FinishKvTransfers() override { return FinishKvSaves(); }

 private:
  struct Pending {
    const model::SequenceState* seq;
    int64_t begin;
    int count;
    absl::Span<std::byte> payload;
    storage::ChunkLayout layout;
    uint64_t ticket;
  };
  absl::Status Land(uint64_t ticket) {
    while (!pending_.empty() && pending_.front().ticket != 0 && pending_.front().ticket <= ticket) {
      const Pending& p = pending_.front();
      if (absl::Status s = inner().SaveKv(*p.seq, p.begin, p.count, p.payload, p.layout); !s.ok()) return s;
      pending_.erase(pending_.begin());
    }
    done_ = std::max(done_, ticket);
    return absl::OkStatus();
  }
  std::shared_ptr<Control> control_;
  std::vector<Pending> pending_;
  uint64_t marked_ = 0, done_ = 0;
};

class WriteBackTest : public ::testing::Test {
 protected:
  // `keep_store`: a new engine (nothing resident in its HBM tier) on the same store.
  void Build(bool late, bool cache = true, bool keep_store = false) {
    engine_.reset();
    if (!keep_store) store_.reset();
    control_ = std::make_shared<LateSavesBackend::Control>();
    const model::ModelConfig c = SmallConfig();
    auto cpu = std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens()));
    if (cache && !keep_store) store_ = HostOnlyStore(c, cpu->weights().fingerprint());
    std::unique_ptr<model::ModelBackend> backend = std::move(cpu);
    if (late) {
      backend = std::make_unique<LateSavesBackend>(
          std::unique_ptr<model::CpuModel>(static_cast<model::CpuModel*>(backend.release())), control_);
    }
    auto e = Engine::Create({}, std::move(backend), &tokenizer_, store_.get(), nullptr);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }
  std::shared_ptr<TurnStream> Submit(const std::string& session, const std::vector<text::ChatMessage>& messages,
                                     int max_new = 24) {
    auto stream = engine_->Submit(ChatTurn(tokenizer_, session, messages, max_new));
    EXPECT_TRUE(stream.ok()) << stream.status();
    return *stream;
  }
  // b's long turn, a's first turn beside it, then a's second turn while b still runs
  // (a's copy in flight, held back). Returns {a1, a2, b1}.
  std::vector<TurnOutput> Conversation() {
    auto b1 = Submit("b", {{"user", "Meanwhile, another session with a longer question to answer."}}, 200);
    std::vector<text::ChatMessage> a = {{"user", "Hello there, strata."}};
    TurnOutput a1 = Collect(Submit("a", a));
    a.push_back({"assistant", a1.text});
    a.push_back({"user", "Tell me more about caches."});
    auto a2 = Submit("a", a);
    TurnOutput b = Collect(b1);
    control_->release = true;
    return {a1, Collect(a2), b};
  }

  text::ByteTokenizer tokenizer_;
  std::shared_ptr<LateSavesBackend::Control> control_;
  std::unique_ptr<storage::SessionStore> store_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(WriteBackTest, TheBatchGoesOnBesideACopyAndTheNextTurnReusesTheKv) {
  Build(/*late=*/false, /*cache=*/false);
  const std::vector<TurnOutput> want = Conversation();
  Build(/*late=*/true);
  const std::vector<TurnOutput> got = Conversation();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "turn " << i;
  }
  EXPECT_GT(control_->polled_not_done.load(), 0) << "the batch never ran beside a copy in flight";
  // a's second turn ran on a's sequence (lent by its copy in flight): from the HBM tier.
  EXPECT_GT(got[1].result.usage.cached_tokens, 0);
  EXPECT_EQ(got[1].result.cache_tier, storage::Tier::kHbm);
}

// A session's next turn does not wait for the previous turn's write-back: it runs on that
// turn's sequence at once (an HBM hit) while the copy is held; the copy lands while it
// runs, and what the two saves stored (the second keeping the first's chunks) serves a
// third turn from the host tier — a new engine on the same store — with the answers of an
// engine without the cache.
TEST_F(WriteBackTest, ANextTurnRunsOnItsSessionsSequenceWhileTheCopyIsInFlight) {
  auto conversation = [&](bool late) {
    std::vector<TurnOutput> out;
    std::vector<text::ChatMessage> a = {{"user", "Hello there, strata."}};
    out.push_back(Collect(Submit("a", a)));
    a.push_back({"assistant", out.back().text});
    a.push_back({"user", "Tell me more about caches."});
    auto second = Submit("a", a, 120);
    TurnStream::Event first;
    EXPECT_TRUE(second->Next(&first, absl::Seconds(60)));
    EXPECT_FALSE(first.done.has_value());
    if (late) {
      EXPECT_FALSE(control_->release) << "the second turn waited for the first's copy";
      EXPECT_GT(control_->polled_not_done.load(), 0) << "the copy was never seen in flight";
    }
    control_->release = true;  // the first turn's copy lands while the second runs
    out.push_back(Collect(second));
    out.back().tokens.insert(out.back().tokens.begin(), first.token_ids.begin(), first.token_ids.end());
    out.back().text = first.text + out.back().text;
    a.push_back({"assistant", out.back().text});
    a.push_back({"user", "And the tiers?"});
    if (late) Build(/*late=*/false, /*cache=*/true, /*keep_store=*/true);
    out.push_back(Collect(Submit("a", a)));
    return out;
  };
  Build(/*late=*/false, /*cache=*/false);
  const std::vector<TurnOutput> want = conversation(false);
  Build(/*late=*/true);
  const std::vector<TurnOutput> got = conversation(true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "turn " << i;
  }
  EXPECT_EQ(got[1].result.cache_tier, storage::Tier::kHbm);
  EXPECT_GT(got[1].result.usage.cached_tokens, 0);
  // The third turn: everything the second turn held, from the chunks both saves wrote.
  EXPECT_EQ(got[2].result.cache_tier, storage::Tier::kHost);
  EXPECT_GE(got[2].result.usage.cached_tokens,
            got[1].result.usage.prompt_tokens + static_cast<int64_t>(got[1].tokens.size()) - 1);
}

// A next turn that does not extend what the copy in flight saves (the conversation was
// edited) would overwrite KV the copy still reads: it waits for that copy, then answers
// as without the cache.
TEST_F(WriteBackTest, AnEditedNextTurnWaitsForTheCopy) {
  auto conversation = [&](bool late) {
    std::vector<TurnOutput> out;
    out.push_back(Collect(Submit("a", {{"user", "Hello there, strata."}})));
    auto second = Submit("a", {{"user", "Hello there, strata!"}, {"assistant", "Hi."}, {"user", "Caches?"}});
    TurnStream::Event e;
    if (late) {
      EXPECT_FALSE(second->Next(&e, absl::Milliseconds(300))) << "ran over KV its session's copy still reads";
    }
    control_->release = true;
    out.push_back(Collect(second));
    return out;
  };
  Build(/*late=*/false, /*cache=*/false);
  const std::vector<TurnOutput> want = conversation(false);
  Build(/*late=*/true);
  const std::vector<TurnOutput> got = conversation(true);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "turn " << i;
  }
  EXPECT_GT(got[1].result.usage.cached_tokens, 0) << "the shared start of the edited turn is reused";
}

TEST_F(WriteBackTest, AFailedCopyDropsTheSessionAndTheNextTurnRecomputes) {
  Build(/*late=*/false, /*cache=*/false);
  const std::vector<TurnOutput> want = Conversation();
  Build(/*late=*/true);
  control_->fail = true;
  const std::vector<TurnOutput> got = Conversation();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "turn " << i;
  }
  EXPECT_EQ(got[1].result.usage.cached_tokens, 0) << "served from a copy that failed";
  engine_.reset();  // waits for the copies in flight: they fail too
  for (const char* session : {"a", "b"}) {
    EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", session}).status())) << session << "'s failed copy is stored";
  }
}

// A backend whose saves of one session fail mid-way, as the CUDA backend's do when a
// flush of its saves fails: SaveKv returns the error, FinishKvSaves too, and the next
// MarkKvSaves reports those lost saves once (model_backend.h).
class LostSavesBackend final : public testing::CpuBackendWrapper {
 public:
  using CpuBackendWrapper::CpuBackendWrapper;
  absl::Status SaveKv(const model::SequenceState& seq, int64_t begin, int count, absl::Span<std::byte> payload,
                      const storage::ChunkLayout& layout) override {
    if (begin > 0 && armed.exchange(false)) {  // a session's second chunk, once armed
      lost_ = absl::DataLossError("a flush of the saves failed (injected)");
      return lost_;
    }
    return CpuBackendWrapper::SaveKv(seq, begin, count, payload, layout);
  }
  absl::StatusOr<uint64_t> MarkKvSaves() override {
    if (!lost_.ok()) return std::exchange(lost_, absl::OkStatus());
    return CpuBackendWrapper::MarkKvSaves();
  }
  absl::Status FinishKvSaves() override { return lost_; }
  std::atomic<bool> armed{false};

 private:
  absl::Status lost_;
};

// One session's save fails; the next session's save, which did not fail, is stored.
TEST_F(WriteBackTest, AFailedSaveDoesNotDropTheNextSessionsSave) {
  const model::ModelConfig c = SmallConfig();
  auto cpu = std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens()));
  store_ = HostOnlyStore(c, cpu->weights().fingerprint());
  auto backend = std::make_unique<LostSavesBackend>(std::move(cpu), "lost-saves-cpu");
  LostSavesBackend* lost = backend.get();
  auto e = Engine::Create({}, std::move(backend), &tokenizer_, store_.get(), nullptr);
  ASSERT_TRUE(e.ok()) << e.status();
  engine_ = *std::move(e);
  const std::string long_text(200, 'x');  // past one chunk
  lost->armed = true;
  TurnOutput bad = Collect(Submit("bad", {{"user", long_text}}));
  ASSERT_TRUE(bad.status.ok()) << bad.status;
  ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsNotFound(store_->Get({"t", "bad"}).status())) << "a failed save is stored";
  TurnOutput good = Collect(Submit("good", {{"user", long_text}}));
  ASSERT_TRUE(good.status.ok()) << good.status;
  ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(10)));
  EXPECT_TRUE(store_->Get({"t", "good"}).ok()) << "the next session's save was dropped for the failed one's";
}

// KV memory held only by a write-back in flight (the one turn that ran has ended, its copy
// not landed): the next session's turn waits for it, and answers as with the cache off
// (it failed with RESOURCE_EXHAUSTED, where the cache off had freed the memory at once).
TEST_F(WriteBackTest, ATurnWaitsForKvMemoryOnlyAWriteBackHolds) {
  const model::ModelConfig c = SmallConfig();
  auto make = [&](storage::SessionStore* store, std::shared_ptr<std::atomic<bool>> release) {
    auto backend = std::make_unique<testing::LimitedBackend>(
        std::make_unique<model::CpuModel>(model::ModelWeights::Random(c, 99, tokenizer_.SilentTokens())), 1, 4096);
    if (release != nullptr) backend->HoldSaves(std::move(release));
    auto e = Engine::Create({}, std::move(backend), &tokenizer_, store, nullptr);
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  };
  const std::vector<text::ChatMessage> first = {{"user", "Hello there."}}, second = {{"user", "Another session."}};
  std::vector<TurnOutput> want;
  {
    auto off = make(nullptr, nullptr);
    for (const auto* m : {&first, &second}) {
      want.push_back(Collect(*off->Submit(ChatTurn(tokenizer_, m == &first ? "a" : "b", *m, 8))));
    }
  }
  store_ = HostOnlyStore(c, model::ModelWeights::Random(c, 99, {}).fingerprint());
  auto release = std::make_shared<std::atomic<bool>>(false);
  engine_ = make(store_.get(), release);
  TurnOutput a = Collect(*engine_->Submit(ChatTurn(tokenizer_, "a", first, 8)));
  ASSERT_TRUE(a.status.ok()) << a.status;
  auto b_stream = engine_->Submit(ChatTurn(tokenizer_, "b", second, 8));
  ASSERT_TRUE(b_stream.ok()) << b_stream.status();
  absl::SleepFor(absl::Milliseconds(100));  // b finds the memory held by a's copy
  *release = true;
  TurnOutput b = Collect(*b_stream);
  ASSERT_TRUE(b.status.ok()) << "a turn failed for memory a write-back was about to give back: " << b.status;
  EXPECT_EQ(a.tokens, want[0].tokens);
  EXPECT_EQ(b.tokens, want[1].tokens);
}

// AwaitIdle (what a drain waits for) covers the write-back: not idle while a finished
// turn's copy is held back, idle once it lands, with the session then stored.
TEST_F(WriteBackTest, IdleOnlyOnceTheWriteBacksHaveLanded) {
  Build(/*late=*/true);
  TurnOutput a1 = Collect(Submit("a", {{"user", "Hello there, strata."}}));
  ASSERT_TRUE(a1.status.ok()) << a1.status;
  EXPECT_FALSE(engine_->AwaitIdle(absl::Milliseconds(200))) << "idle with a copy in flight";
  const std::vector<int32_t> prompt = *tokenizer_.RenderChat({{"user", "Hello there, strata."}});
  EXPECT_EQ(store_->Match({"t", "a"}, prompt, static_cast<int64_t>(prompt.size())).tokens, 0)
      << "served before its copy landed";
  control_->release = true;
  ASSERT_TRUE(engine_->AwaitIdle(absl::Seconds(10)));
  EXPECT_GT(store_->Match({"t", "a"}, prompt, static_cast<int64_t>(prompt.size())).tokens, 0);
}

}  // namespace
}  // namespace strata::engine
