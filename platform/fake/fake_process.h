// FakeProcessLauncher: a ProcessLauncher that runs nothing, for tests. Each
// Start makes a FakeProcesses record the test drives: a process "exits" when
// the test says so, and Stop / Signal / Kill are recorded. Stop follows the
// real contract on a Clock: live processes that take the stop signal end by
// it at once; when one ignores it, Stop sleeps the grace period on the clock
// (a FakeClock just moves on) and then kills it (signal 9).
#ifndef MUSTER_PLATFORM_FAKE_FAKE_PROCESS_H_
#define MUSTER_PLATFORM_FAKE_FAKE_PROCESS_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/clock.h"
#include "muster/platform/process.h"

namespace muster::platform {

// The processes of one fake Start. Thread-safe; outlives the group the code
// under test holds.
class FakeProcesses {
 public:
  struct StopCall {
    int signal = 0;
    absl::Duration grace;
    // Whether some process ignored the signal and was killed after the grace.
    bool killed_after_grace = false;
  };

  FakeProcesses(std::vector<ProcessSpec> specs, Clock* clock, int first_pid);

  const std::vector<ProcessSpec>& specs() const { return specs_; }

  // Process `index` ends by itself: with `exit_code`, or killed by `signal`
  // (when non-zero). No-op when it has already ended.
  void Exit(size_t index, int exit_code, int signal = 0);
  // Its last stderr line, as the real reader would keep it.
  void SetLastStderrLine(size_t index, std::string line);
  // From now on process `index` ignores every signal but the kill.
  void IgnoreStopSignals(size_t index);
  // LaunchOptions::on_exit: called (no lock held) after ends are recorded.
  void SetOnExit(std::function<void()> on_exit);

  // What the code under test did.
  std::vector<StopCall> stop_calls() const;
  std::vector<int> signals() const;   // Signal() calls
  std::vector<size_t> kills() const;  // Kill() calls that hit a live process
  bool running(size_t index) const;
  // Whether the group object was destroyed (its owner let it go).
  bool released() const;

  // --- the ProcessGroup side (FakeProcessLauncher's group forwards here)
  GroupStatus Poll();
  GroupStatus Wait(absl::Duration timeout);
  GroupStatus Stop(int signal, absl::Duration grace);
  void Signal(int signal);
  bool Kill(size_t index, const std::string& reason);
  std::vector<int> pids() const;
  void MarkReleased();

 private:
  struct Proc {
    int pid = 0;
    bool ended = false;
    bool ignores_stop = false;
    ProcessExit exit;
    std::string last_stderr_line;
  };
  // Returns whether it ended now.
  bool EndLocked(size_t index, int exit_code, int signal,
                 const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyExit();
  GroupStatus StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<ProcessSpec> specs_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::vector<Proc> procs_ ABSL_GUARDED_BY(mu_);
  std::vector<StopCall> stop_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<int> signals_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> kills_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_exit_ ABSL_GUARDED_BY(mu_);
};

// Thread-safe.
class FakeProcessLauncher : public ProcessLauncher {
 public:
  // `clock` times the grace periods of Stop; not owned.
  explicit FakeProcessLauncher(Clock* clock = Clock::Real());

  absl::StatusOr<std::unique_ptr<ProcessGroup>> Start(
      std::vector<ProcessSpec> specs, LaunchOptions options) override;

  // The next Start fails with `status` (once).
  void FailNextStart(absl::Status status);

  // Every Start so far, in order.
  std::vector<std::shared_ptr<FakeProcesses>> groups() const;
  // Blocks up to `timeout` (real time) until at least `n` groups started;
  // returns the n-th (1-based), or nullptr on timeout.
  std::shared_ptr<FakeProcesses> WaitForGroup(size_t n,
                                              absl::Duration timeout) const;

 private:
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<FakeProcesses>> groups_ ABSL_GUARDED_BY(mu_);
  absl::Status next_failure_ ABSL_GUARDED_BY(mu_);
  int next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_FAKE_FAKE_PROCESS_H_
