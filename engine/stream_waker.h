// Wakes the consumers of turn streams on threads of its own. A decode step pushes a token
// to every running turn's stream; waking each stream's sleeping request thread costs the
// waker a few microseconds (~0.2 ms of every decode step for 64 turns on the H200 VM,
// docs/BENCHMARKS.md), time the engine loop would otherwise take from the next step. The
// engine pushes without waking (TurnStream::PushDelta's `wake`) and hands the streams here.
#ifndef STRATA_ENGINE_STREAM_WAKER_H_
#define STRATA_ENGINE_STREAM_WAKER_H_

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "engine/turn.h"

namespace strata::engine {

class StreamWaker {
 public:
  // `threads` >= 1 wake the streams handed over, in the order given.
  explicit StreamWaker(int threads);
  // Wakes whatever is still queued, then joins the threads.
  ~StreamWaker();
  StreamWaker(const StreamWaker&) = delete;
  StreamWaker& operator=(const StreamWaker&) = delete;

  // Queues `streams` to be woken (TurnStream::Wake); returns at once.
  void Wake(std::vector<std::shared_ptr<TurnStream>> streams);

 private:
  void Run();

  Mutex mu_;
  std::deque<std::shared_ptr<TurnStream>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::engine

#endif  // STRATA_ENGINE_STREAM_WAKER_H_
