// The part of a ProcessGroup that is the same on every OS: Poll and Wait over
// the exits recorded in the shared state, and Stop's order (ask to stop, the
// grace period, kill every tree, wait for the exits, finish the threads). The
// OS side (posix/process_group.cc, windows/process_windows.cc) supplies the
// steps. Private to platform.
//
// SharedT has: absl::Mutex mu; a vector `procs` of entries with `recorded`,
// `exit` (ProcessExit) and `last_stderr_line`; `int unrecorded`;
// `bool any_failed` (all guarded by mu).
#ifndef MUSTER_PLATFORM_SRC_GROUP_SKELETON_H_
#define MUSTER_PLATFORM_SRC_GROUP_SKELETON_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/logging.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "platform/src/process_plan.h"

namespace muster::platform::internal {

template <typename SharedT>
class GroupSkeleton : public ProcessGroup {
 public:
  GroupStatus Poll() override {
    absl::MutexLock lock(&shared_->mu);
    return StatusLocked();
  }

  GroupStatus Wait(absl::Duration timeout) override {
    // Locked as shared_->mu, the name StatusLocked requires: the analysis
    // cannot tell that an alias (s->mu) is the same mutex.
    absl::MutexLock lock(&shared_->mu);
    SharedT* s = shared_.get();
    auto not_running = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->any_failed || s->unrecorded == 0;
    };
    s->mu.AwaitWithTimeout(absl::Condition(&not_running), timeout);
    return StatusLocked();
  }

  GroupStatus Stop(int signal, absl::Duration grace) override {
    absl::MutexLock stop_lock(&stop_mu_);
    if (stopped_) return Poll();
    AskToStop(signal);
    if (!AwaitAllRecorded(grace)) {
      MUSTER_LOG(WARNING) << "workers still running "
                          << absl::FormatDuration(grace) << " after signal "
                          << signal << " (" << SignalName(signal) << "); "
                          << kill_step_;
    }
    // Also when every process is gone: what they started must not outlive
    // them.
    KillAll();
    if (!AwaitAllRecorded(kill_timeout_)) {
      MUSTER_LOG(ERROR) << "workers did not end within "
                        << absl::FormatDuration(kill_timeout_) << " of "
                        << kill_step_
                        << " (uninterruptible sleep?); leaving them";
    }
    FinishThreads();
    stopped_ = true;
    return Poll();
  }

  std::vector<int> pids() const override { return pids_; }

 protected:
  // kill_step: what KillAll does, for the log ("sending SIGKILL").
  GroupSkeleton(std::shared_ptr<SharedT> shared, std::vector<int> pids,
                std::string kill_step, absl::Duration kill_timeout)
      : shared_(std::move(shared)),
        pids_(std::move(pids)),
        kill_step_(std::move(kill_step)),
        kill_timeout_(kill_timeout) {}

  // Asks every live process to stop (`signal`), without waiting.
  virtual void AskToStop(int signal) = 0;
  // Kills every process's tree, also of processes that already ended.
  virtual void KillAll() = 0;
  // Drains the output and ends (or lets go of) the group's threads.
  virtual void FinishThreads() = 0;

  bool stopped() {
    absl::MutexLock lock(&stop_mu_);
    return stopped_;
  }

  const std::shared_ptr<SharedT> shared_;

 private:
  bool AwaitAllRecorded(absl::Duration timeout) {
    SharedT* s = shared_.get();
    auto all_recorded = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->unrecorded == 0;
    };
    absl::MutexLock lock(&s->mu);
    return s->mu.AwaitWithTimeout(absl::Condition(&all_recorded), timeout);
  }

  GroupStatus StatusLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
    std::vector<ProcessExit> exits;
    for (const auto& p : shared_->procs) {
      if (!p.recorded) continue;
      exits.push_back(p.exit);
      exits.back().last_stderr_line = p.last_stderr_line;
    }
    return MakeGroupStatus(std::move(exits), shared_->any_failed,
                           shared_->unrecorded == 0);
  }

  const std::vector<int> pids_;
  const std::string kill_step_;
  const absl::Duration kill_timeout_;
  absl::Mutex stop_mu_;  // serializes Stop; held across it
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace muster::platform::internal

#endif  // MUSTER_PLATFORM_SRC_GROUP_SKELETON_H_
