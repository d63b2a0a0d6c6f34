// strata::Mutex: absl::Mutex, visible to ThreadSanitizer.
//
// Debian's Abseil is a shared library built without TSan, so TSan never sees absl::Mutex
// lock and unlock and reports every access it guards as a race. This wrapper tells TSan
// about the happens-before edges itself (release before unlocking, acquire after locking,
// and acquire before every evaluation of an Await condition, which Abseil may run on the
// unlocking thread). Without TSan the annotations compile to nothing.
#ifndef STRATA_BASE_MUTEX_H_
#define STRATA_BASE_MUTEX_H_

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace strata {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.Lock();
    Acquired();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    Released();
    mu_.Unlock();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() { mu_.AssertHeld(); }

  // Releases the lock until `ready()` holds, then returns holding it again. `ready` is
  // called with the lock held.
  template <typename Pred>
  void Await(Pred ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    Released();
    auto annotated = [this, &ready]() {
      Acquired();
      bool ok = static_cast<bool>(ready());
      Released();  // the lock may be handed on without this thread's Unlock
      return ok;
    };
    mu_.Await(absl::Condition(&annotated));
    Acquired();
  }

  // As Await, but gives up after `timeout`; returns whether `ready()` held.
  template <typename Pred>
  bool AwaitWithTimeout(Pred ready, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    Released();
    auto annotated = [this, &ready]() {
      Acquired();
      bool ok = static_cast<bool>(ready());
      Released();  // the lock may be handed on without this thread's Unlock
      return ok;
    };
    bool ok = mu_.AwaitWithTimeout(absl::Condition(&annotated), timeout);
    Acquired();
    return ok;
  }

 private:
  void Acquired() const {
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(const_cast<Mutex*>(this));
#endif
  }
  void Released() const {
#if defined(__SANITIZE_THREAD__)
    __tsan_release(const_cast<Mutex*>(this));
#endif
  }

  mutable absl::Mutex mu_;
};

// Holds a Mutex for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Releases a held Mutex for its scope (to do slow work without the lock).
class ABSL_SCOPED_LOCKABLE MutexUnlock {
 public:
  explicit MutexUnlock(Mutex* mu) ABSL_UNLOCK_FUNCTION(mu) : mu_(mu) { mu_->Unlock(); }
  ~MutexUnlock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_->Lock(); }
  MutexUnlock(const MutexUnlock&) = delete;
  MutexUnlock& operator=(const MutexUnlock&) = delete;

 private:
  Mutex* const mu_;
};

// A one-shot event, like absl::Notification, built on Mutex so TSan sees Notify() happen
// before the wait returns.
class Notification {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  void WaitForNotification() {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_; });
  }
  bool HasBeenNotified() {
    MutexLock lock(&mu_);
    return notified_;
  }

 private:
  Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace strata

#endif  // STRATA_BASE_MUTEX_H_
