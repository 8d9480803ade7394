// FakeStopRequests: a StopRequestSource that a test drives. Request(signal)
// delivers a stop request as the OS would deliver that signal: to the watcher
// when one runs, else to the next Wait. No signal is blocked or sent.
#ifndef MUSTER_PLATFORM_FAKE_FAKE_STOP_REQUESTS_H_
#define MUSTER_PLATFORM_FAKE_FAKE_STOP_REQUESTS_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "muster/platform/stop_requests.h"

namespace muster::platform {

// Thread-safe.
class FakeStopRequests final : public StopRequestSource {
 public:
  FakeStopRequests() = default;
  // Ends the watcher thread, if any (requests still queued are dropped).
  ~FakeStopRequests() override;
  FakeStopRequests(const FakeStopRequests&) = delete;
  FakeStopRequests& operator=(const FakeStopRequests&) = delete;

  // A stop request as signal `signal`.
  void Request(int signal);

  // Blocks until a request arrives (forever when none does, as the OS's).
  int Wait() override;
  void StartWatcher(std::function<void(int)> on_stop) override;

 private:
  // Blocks until a request is queued (returns it) or the object ends (-1).
  int Next();
  bool HasNext() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<int> queue_ ABSL_GUARDED_BY(mu_);
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_FAKE_FAKE_STOP_REQUESTS_H_
