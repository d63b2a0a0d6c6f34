// A turn's stream with its wake-up deferred (TurnStream::PushDelta's `wake`), and the
// StreamWaker that does it on its own threads.
#include "engine/stream_waker.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/testing/engine_testing.h"
#include "engine/turn.h"
#include "gtest/gtest.h"
#include "text/tokenizer.h"

namespace strata::engine {
namespace {

TEST(TurnStreamTest, ADeltaPushedWithoutAWakeWaitsForWake) {
  TurnStream stream;
  const int32_t token = 7;
  stream.PushDelta({&token, 1}, "a", /*wake=*/false);
  TurnStream::Event e;
  EXPECT_FALSE(stream.Next(&e, absl::Milliseconds(20))) << "not to be taken before its wake";
  stream.Wake();
  ASSERT_TRUE(stream.Next(&e, absl::ZeroDuration()));
  EXPECT_EQ(e.token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(e.text, "a");
}

TEST(TurnStreamTest, EventsAlreadyWokenStayTakeableWhenMoreComeWithoutAWake) {
  TurnStream stream;
  const int32_t a = 1, b = 2;
  stream.PushDelta({&a, 1}, "x");
  stream.PushDelta({&b, 1}, "y", /*wake=*/false);  // coalesced into the first
  TurnStream::Event e;
  ASSERT_TRUE(stream.Next(&e, absl::ZeroDuration()));
  EXPECT_EQ(e.token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(e.text, "xy");
}

TEST(TurnStreamTest, FinishAndFailWakeWhatWasPushedWithoutAWake) {
  for (bool fail : {false, true}) {
    TurnStream stream;
    const int32_t token = 3;
    stream.PushDelta({&token, 1}, "z", /*wake=*/false);
    if (fail) {
      stream.Fail(absl::InternalError("broken"));
    } else {
      stream.Finish(TurnResult{});
    }
    TurnStream::Event e;
    ASSERT_TRUE(stream.Next(&e, absl::ZeroDuration())) << fail;
    EXPECT_EQ(e.token_ids, std::vector<int32_t>{3});
    ASSERT_TRUE(stream.Next(&e, absl::ZeroDuration())) << fail;
    EXPECT_EQ(e.done.has_value(), !fail);
    EXPECT_EQ(e.error.ok(), !fail);
  }
}

// Request threads asleep in Next are woken by the waker's threads, each exactly with what
// was pushed for it.
TEST(StreamWakerTest, WakesTheConsumersOfTheStreamsHandedOver) {
  constexpr int kStreams = 16;
  std::vector<std::shared_ptr<TurnStream>> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_shared<TurnStream>());
  std::atomic<int> woken{0};
  std::vector<std::thread> consumers;
  for (int i = 0; i < kStreams; ++i) {
    consumers.emplace_back([&, i] {
      TurnStream::Event e;
      if (streams[i]->Next(&e, absl::Seconds(30)) && e.token_ids == std::vector<int32_t>{i}) ++woken;
    });
  }
  absl::SleepFor(absl::Milliseconds(20));  // the consumers asleep in Next
  for (int32_t i = 0; i < kStreams; ++i) streams[i]->PushDelta({&i, 1}, "", /*wake=*/false);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(woken.load(), 0) << "nothing wakes them but the waker";
  const absl::Time start = absl::Now();
  {
    StreamWaker waker(2);
    waker.Wake(streams);
    for (std::thread& t : consumers) t.join();
  }
  EXPECT_EQ(woken.load(), kStreams);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// What is queued when the waker goes is still woken.
TEST(StreamWakerTest, WakesWhatIsQueuedBeforeItStops) {
  auto stream = std::make_shared<TurnStream>();
  const int32_t token = 5;
  stream->PushDelta({&token, 1}, "", /*wake=*/false);
  {
    StreamWaker waker(1);
    waker.Wake({stream});
  }
  TurnStream::Event e;
  ASSERT_TRUE(stream->Next(&e, absl::ZeroDuration()));
  EXPECT_EQ(e.token_ids, std::vector<int32_t>{5});
}

// The engine streams each token as its step ends, with the wake-ups on the waker's threads
// or on its own loop: a turn of 12 steps of 10 ms reaches its reader in several events
// (a stream left asleep would hold every token until the turn's end), and the tokens are
// the same either way.
TEST(StreamWakerTest, AnEngineStreamsEachStepsTokenWithAndWithoutWakers) {
  text::ByteTokenizer tokenizer;
  std::vector<int32_t> first_tokens;
  for (int wakers : {2, 0}) {
    EngineOptions options;
    options.warmup_tokens = 0;
    options.stream_wake_threads = wakers;
    auto engine = Engine::Create(
        options,
        std::make_unique<testing::SlowBackend>(
            std::make_unique<model::CpuModel>(model::ModelWeights::Random(testing::SmallConfig(), 5, {})),
            absl::Milliseconds(10)),
        &tokenizer, nullptr, nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    TurnRequest turn;
    turn.key = {"t", "s"};
    turn.prompt = *tokenizer.RenderChat({{"user", "Stream it."}});
    turn.max_new_tokens = 12;
    auto stream = (*engine)->Submit(turn);
    ASSERT_TRUE(stream.ok());
    std::vector<int32_t> tokens;
    int deltas = 0;
    TurnStream::Event e;
    while ((*stream)->Next(&e, absl::Seconds(60))) {
      if (!e.token_ids.empty()) ++deltas;
      tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
    }
    EXPECT_EQ(tokens.size(), 12u) << wakers;
    EXPECT_GE(deltas, 4) << wakers << " wake threads: the tokens came together";
    if (first_tokens.empty()) {
      first_tokens = tokens;
    } else {
      EXPECT_EQ(tokens, first_tokens);
    }
  }
}

}  // namespace
}  // namespace strata::engine
