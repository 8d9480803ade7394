// The Clock seam: the rendezvous state machine and the agent read time only
// through it, so tests drive timeouts with a FakeClock instead of sleeping.
#ifndef MUSTER_COMMON_CLOCK_H_
#define MUSTER_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace muster {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The process-wide real clock. Never null, never destroyed.
  static Clock* Real();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000'000));
  absl::Time Now() const override;
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster

#endif  // MUSTER_COMMON_CLOCK_H_
