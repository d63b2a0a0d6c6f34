// IoBatch: waits for a batch of asynchronous completions and keeps the first error.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "base/mutex.h"

namespace strata::storage {

// Each Callback() adds one pending completion; Wait() blocks until all have run and returns
// the first non-OK status. The batch must outlive every callback it handed out.
class IoBatch {
 public:
  std::function<void(absl::Status)> Callback() {
    {
      MutexLock lock(&mu_);
      ++pending_;
    }
    return [this](absl::Status s) {
      MutexLock lock(&mu_);
      if (!s.ok() && status_.ok()) status_ = std::move(s);
      --pending_;
    };
  }

  absl::Status Wait() {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; });
    return status_;
  }

 private:
  Mutex mu_;
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage
