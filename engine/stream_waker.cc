#include "engine/stream_waker.h"

#include <utility>

namespace strata::engine {

StreamWaker::StreamWaker(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

StreamWaker::~StreamWaker() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void StreamWaker::Wake(std::vector<std::shared_ptr<TurnStream>> streams) {
  MutexLock lock(&mu_);
  for (auto& s : streams) queue_.push_back(std::move(s));
}

void StreamWaker::Run() {
  for (;;) {
    std::shared_ptr<TurnStream> stream;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to wake
      stream = std::move(queue_.front());
      queue_.pop_front();
    }
    stream->Wake();
  }
}

}  // namespace strata::engine
