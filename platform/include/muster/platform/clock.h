// The Clock seam: the rendezvous state machine and the agent read time (and
// sleep) only through it, so tests drive timeouts with a FakeClock instead of
// sleeping. Time that must be real (gRPC deadlines, waits on the kernel) is
// read inside platform/ and the transports, not through this seam.
#ifndef MUSTER_PLATFORM_CLOCK_H_
#define MUSTER_PLATFORM_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace muster {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // Blocks the caller for `d` of this clock's time (the real clock sleeps; a
  // fake one moves forward by `d` and returns at once). A zero or negative
  // duration returns at once.
  virtual void SleepFor(absl::Duration d) = 0;

  // The process-wide real clock. Never null, never destroyed.
  static Clock* Real();
};

// A clock that moves only when told to (Advance, Set, or SleepFor, which
// advances it by the time slept). Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000'000));
  absl::Time Now() const override;
  void SleepFor(absl::Duration d) override;
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster

#endif  // MUSTER_PLATFORM_CLOCK_H_
