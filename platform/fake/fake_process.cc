#include "platform/fake/fake_process.h"

#include <algorithm>
#include <utility>

#include "muster/platform/signals.h"
#include "platform/src/process_plan.h"

namespace muster::platform {
namespace {

class FakeGroup : public ProcessGroup {
 public:
  explicit FakeGroup(std::shared_ptr<FakeProcesses> procs)
      : procs_(std::move(procs)) {}
  ~FakeGroup() override { procs_->MarkReleased(); }
  GroupStatus Poll() override { return procs_->Poll(); }
  GroupStatus Wait(absl::Duration timeout) override {
    return procs_->Wait(timeout);
  }
  GroupStatus Stop(int signal, absl::Duration grace) override {
    return procs_->Stop(signal, grace);
  }
  void Signal(int signal) override { procs_->Signal(signal); }
  bool Kill(size_t index, const std::string& reason) override {
    return procs_->Kill(index, reason);
  }
  std::vector<int> pids() const override { return procs_->pids(); }

 private:
  const std::shared_ptr<FakeProcesses> procs_;
};

}  // namespace

FakeProcesses::FakeProcesses(std::vector<ProcessSpec> specs, Clock* clock,
                             int first_pid)
    : specs_(std::move(specs)), clock_(clock) {
  absl::MutexLock lock(&mu_);
  procs_.resize(specs_.size());
  for (size_t i = 0; i < procs_.size(); ++i) {
    procs_[i].pid = first_pid + static_cast<int>(i);
  }
}

bool FakeProcesses::EndLocked(size_t index, int exit_code, int signal,
                              const std::string& reason) {
  Proc& p = procs_[index];
  if (p.ended) return false;
  p.ended = true;
  p.exit.index = index;
  p.exit.pid = p.pid;
  p.exit.exit_code = signal != 0 ? -1 : exit_code;
  p.exit.signal = signal;
  p.exit.end_time = clock_->Now();
  p.exit.kill_reason = reason;
  return true;
}

void FakeProcesses::SetOnExit(std::function<void()> on_exit) {
  absl::MutexLock lock(&mu_);
  on_exit_ = std::move(on_exit);
}

void FakeProcesses::NotifyExit() {
  std::function<void()> on_exit;
  {
    absl::MutexLock lock(&mu_);
    on_exit = on_exit_;
  }
  if (on_exit) on_exit();
}

void FakeProcesses::Exit(size_t index, int exit_code, int signal) {
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    if (index < procs_.size()) ended = EndLocked(index, exit_code, signal, "");
  }
  if (ended) NotifyExit();
}

void FakeProcesses::SetLastStderrLine(size_t index, std::string line) {
  absl::MutexLock lock(&mu_);
  if (index < procs_.size()) procs_[index].last_stderr_line = std::move(line);
}

void FakeProcesses::IgnoreStopSignals(size_t index) {
  absl::MutexLock lock(&mu_);
  if (index < procs_.size()) procs_[index].ignores_stop = true;
}

std::vector<FakeProcesses::StopCall> FakeProcesses::stop_calls() const {
  absl::MutexLock lock(&mu_);
  return stop_calls_;
}
std::vector<int> FakeProcesses::signals() const {
  absl::MutexLock lock(&mu_);
  return signals_;
}
std::vector<size_t> FakeProcesses::kills() const {
  absl::MutexLock lock(&mu_);
  return kills_;
}
bool FakeProcesses::running(size_t index) const {
  absl::MutexLock lock(&mu_);
  return index < procs_.size() && !procs_[index].ended;
}
bool FakeProcesses::released() const {
  absl::MutexLock lock(&mu_);
  return released_;
}
void FakeProcesses::MarkReleased() {
  absl::MutexLock lock(&mu_);
  released_ = true;
}

GroupStatus FakeProcesses::StatusLocked() const {
  std::vector<ProcessExit> exits;
  bool all_ended = true;
  bool any_failed = false;
  for (const Proc& p : procs_) {
    if (!p.ended) {
      all_ended = false;
      continue;
    }
    exits.push_back(p.exit);
    exits.back().last_stderr_line = p.last_stderr_line;
    if (!p.exit.succeeded()) any_failed = true;
  }
  return internal::MakeGroupStatus(std::move(exits), any_failed, all_ended);
}

GroupStatus FakeProcesses::Poll() {
  absl::MutexLock lock(&mu_);
  return StatusLocked();
}

GroupStatus FakeProcesses::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return StatusLocked().state != GroupState::kRunning;
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return StatusLocked();
}

GroupStatus FakeProcesses::Stop(int signal, absl::Duration grace) {
  StopCall call;
  call.signal = signal;
  call.grace = grace;
  bool holdouts = false;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < procs_.size(); ++i) {
      if (procs_[i].ended) continue;
      if (procs_[i].ignores_stop && signal != kSignalKill) {
        holdouts = true;
      } else {
        EndLocked(i, -1, signal, "");
      }
    }
  }
  if (holdouts) {
    // As the real group: the grace period, then the kill.
    clock_->SleepFor(grace);
    call.killed_after_grace = true;
  }
  GroupStatus status;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < procs_.size(); ++i) {
      EndLocked(i, -1, kSignalKill, "");
    }
    stop_calls_.push_back(call);
    status = StatusLocked();
  }
  NotifyExit();
  return status;
}

void FakeProcesses::Signal(int signal) {
  absl::MutexLock lock(&mu_);
  signals_.push_back(signal);
}

bool FakeProcesses::Kill(size_t index, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (index >= procs_.size() || procs_[index].ended) return false;
    kills_.push_back(index);
    EndLocked(index, -1, kSignalKill, reason);
  }
  NotifyExit();
  return true;
}

std::vector<int> FakeProcesses::pids() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> pids;
  for (const Proc& p : procs_) pids.push_back(p.pid);
  return pids;
}

FakeProcessLauncher::FakeProcessLauncher(Clock* clock) : clock_(clock) {}

absl::StatusOr<std::unique_ptr<ProcessGroup>> FakeProcessLauncher::Start(
    std::vector<ProcessSpec> specs, LaunchOptions options) {
  absl::MutexLock lock(&mu_);
  if (!next_failure_.ok()) {
    return std::exchange(next_failure_, absl::OkStatus());
  }
  if (specs.empty()) return absl::InvalidArgumentError("no processes to start");
  const int first = next_pid_;
  next_pid_ += static_cast<int>(specs.size());
  auto procs = std::make_shared<FakeProcesses>(std::move(specs), clock_, first);
  procs->SetOnExit(std::move(options.on_exit));
  groups_.push_back(procs);
  return std::unique_ptr<ProcessGroup>(new FakeGroup(procs));
}

void FakeProcessLauncher::FailNextStart(absl::Status status) {
  absl::MutexLock lock(&mu_);
  next_failure_ = std::move(status);
}

std::vector<std::shared_ptr<FakeProcesses>> FakeProcessLauncher::groups()
    const {
  absl::MutexLock lock(&mu_);
  return groups_;
}

std::shared_ptr<FakeProcesses> FakeProcessLauncher::WaitForGroup(
    size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return groups_.size() >= n;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&enough), timeout)) return nullptr;
  return groups_[n - 1];
}

}  // namespace muster::platform
