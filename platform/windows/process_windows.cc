// ProcessLauncher on Windows: each process started suspended with
// CreateProcessW in a new console process group and its own job object
// (kill-on-close), one waiter thread for the process handles, one reader
// thread per output pipe, and Stop as Ctrl-Break + the group's stop event ->
// grace -> TerminateJobObject -> drain.
//
// clang-format off
//   ProcessGroup ──shared_ptr──► Shared (procs, jobs, exits; one mutex)
//     ├─ waiter thread ──── WaitForMultipleObjects(process handles) → exits
//     └─ reader thread per pipe ── ReadFile → lines → console, log files,
//                                  filtered files (one write per line)
// clang-format on
//
// Graceful stop: Windows has no SIGTERM. Stop sends CTRL_BREAK_EVENT to each
// process's console group (GenerateConsoleCtrlEvent: it reaches only
// processes sharing the launcher's console, and under wine it reaches none)
// and sets the group's named stop event, whose name each process finds in
// MUSTER_STOP_EVENT (a worker without a console can watch it). Whatever did
// not end within the grace period is ended with TerminateJobObject, which
// takes its whole tree, and reported as killed by SIGKILL.
#include <windows.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/platform/env.h"
#include "muster/platform/logging.h"
#include "muster/platform/process.h"
#include "muster/platform/signals.h"
#include "platform/src/group_skeleton.h"
#include "platform/src/process_plan.h"
#include "platform/windows/output_windows.h"
#include "platform/windows/spawn_windows.h"

namespace muster::platform::windows {
namespace {

// After TerminateJobObject, how long a stop waits for the processes to go.
constexpr absl::Duration kKillReapTimeout = absl::Seconds(10);
// After every process ended, how long Stop lets the readers drain the pipes.
constexpr absl::Duration kDrainTimeout = absl::Seconds(3);

// The environment variable naming a group's stop event.
constexpr char kStopEventVariable[] = "MUSTER_STOP_EVENT";

std::string NewStopEventName() {
  static std::atomic<int> next{0};
  return absl::StrCat("Local\\muster-stop-", GetCurrentProcessId(), "-",
                      next.fetch_add(1));
}

class WindowsProcessGroup : public internal::GroupSkeleton<Shared> {
 public:
  WindowsProcessGroup(std::shared_ptr<Shared> shared, std::vector<int> pids)
      : GroupSkeleton(std::move(shared), std::move(pids),
                      "terminating their job objects", kKillReapTimeout) {}

  ~WindowsProcessGroup() override {
    if (!stopped()) Stop(kSignalTerminate, absl::Seconds(5));
  }

  void StartThreads(std::vector<Stream> streams) {
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->readers_left = static_cast<int>(streams.size());
    }
    for (Stream& s : streams) {
      readers_.emplace_back(ReadStream, shared_, std::move(s));
    }
    waiter_ = std::thread(WaitLoop, shared_);
  }

  void Signal(int signal) override { AskToStop(signal); }

  bool Kill(size_t index, const std::string& reason) override {
    absl::MutexLock lock(&shared_->mu);
    if (index >= shared_->procs.size()) return false;
    ProcState& p = shared_->procs[index];
    if (p.recorded) return false;
    p.kill_reason = reason;
    p.killed = true;
    TerminateJobObject(p.job.get(), kKilledExitCode);
    SetEvent(shared_->wake.get());
    return true;
  }

 private:
  // Ctrl-Break and the stop event; SIGKILL ends the jobs at once.
  void AskToStop(int signal) override {
    if (signal == kSignalKill) {
      TerminateJobs(/*include_ended=*/false);
    } else {
      SendStop(signal);
    }
  }
  void KillAll() override { TerminateJobs(/*include_ended=*/true); }

  // Every stop signal is Ctrl-Break: GenerateConsoleCtrlEvent cannot send
  // Ctrl-C to one process group (only to the whole console).
  void SendStop(int signal) {
    absl::MutexLock lock(&shared_->mu);
    for (ProcState& p : shared_->procs) {
      if (p.recorded) continue;
      p.stop_sent = true;
      p.stop_signal = signal;
      // Only to a live process: Windows sends an event for a process group
      // that no longer exists to every process on the console, the launcher
      // included. Fails (harmlessly) when the launcher has no console; under
      // wine it is never delivered. The stop event and the grace period cover
      // both.
      if (WaitForSingleObject(p.process.get(), 0) != WAIT_TIMEOUT) continue;
      if (!GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT,
                                    static_cast<DWORD>(p.pid))) {
        MUSTER_LOG(DEBUG) << "Ctrl-Break to " << p.name << ": "
                          << LastErrorText();
      }
    }
    SetEvent(shared_->stop_event.get());
  }

  void TerminateJobs(bool include_ended) {
    absl::MutexLock lock(&shared_->mu);
    for (ProcState& p : shared_->procs) {
      if (p.recorded && !include_ended) continue;
      if (!p.recorded) p.killed = true;
      TerminateJobObject(p.job.get(), kKilledExitCode);
    }
    SetEvent(shared_->wake.get());
  }

  void FinishThreads() override {
    Shared* s = shared_.get();
    auto readers_done = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->readers_left == 0;
    };
    bool drained;
    bool waited;
    {
      absl::MutexLock lock(&s->mu);
      drained =
          s->mu.AwaitWithTimeout(absl::Condition(&readers_done), kDrainTimeout);
      s->waiter_quit = true;
    }
    SetEvent(s->wake.get());
    auto waiter_done = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->waiter_done;
    };
    {
      absl::MutexLock lock(&s->mu);
      waited = s->mu.AwaitWithTimeout(absl::Condition(&waiter_done),
                                      absl::Seconds(2));
    }
    if (!drained) {
      // Only a process outside the jobs (started with breakaway) can hold a
      // pipe now; its reader keeps its own reference to the shared state.
      MUSTER_LOG(WARNING) << "worker output not drained "
                          << absl::FormatDuration(kDrainTimeout)
                          << " after the workers ended; giving up on it";
    }
    for (std::thread& t : readers_) {
      if (t.joinable()) drained ? t.join() : t.detach();
    }
    if (waiter_.joinable()) waited ? waiter_.join() : waiter_.detach();
  }

  std::vector<std::thread> readers_;
  std::thread waiter_;
};

// The destinations of every stream, opened before anything runs.
absl::StatusOr<std::vector<Stream>> OpenStreams(
    const std::vector<ProcessSpec>& specs, const LaunchOptions& options) {
  std::shared_ptr<UniqueHandle> shared_files[2];
  const std::shared_ptr<const std::vector<std::string>> filters[2] = {
      std::make_shared<const std::vector<std::string>>(options.stdout_filters),
      std::make_shared<const std::vector<std::string>>(options.stderr_filters)};
  for (bool is_stderr : {false, true}) {
    const std::string name = internal::FilteredFile(options, is_stderr);
    if (name.empty()) continue;
    auto opened = OpenLogFile(name);
    if (!opened.ok()) return opened.status();
    shared_files[is_stderr] =
        std::make_shared<UniqueHandle>(*std::move(opened));
  }
  std::vector<Stream> streams;
  for (internal::StreamPlan& plan : internal::PlanStreams(specs, options)) {
    Stream s;
    s.proc_index = plan.proc_index;
    s.is_stderr = plan.is_stderr;
    s.prefix = std::move(plan.prefix);
    s.console = ConsoleHandle(plan.console_fd);
    if (plan.filtered) {
      s.filtered = shared_files[plan.is_stderr];
      s.filters = filters[plan.is_stderr];
    }
    if (!plan.file.empty()) {
      auto opened = OpenLogFile(plan.file);
      if (!opened.ok()) return opened.status();
      s.file = *std::move(opened);
      s.file_name = std::move(plan.file);
    }
    streams.push_back(std::move(s));
  }
  return streams;
}

class WindowsLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<ProcessGroup>> Start(
      std::vector<ProcessSpec> specs, LaunchOptions options) override {
    auto names = internal::CheckSpecs(specs);
    if (!names.ok()) return names.status();
    std::vector<SpawnRequest> requests;
    const std::string stop_name = NewStopEventName();
    for (size_t i = 0; i < specs.size(); ++i) {
      const ProcessSpec& p = specs[i];
      SpawnRequest r;
      r.name = (*names)[i];
      auto resolved = ResolveCommand(p.argv, p.env);
      if (!resolved.ok()) return resolved.status();
      r.command = *std::move(resolved);
      r.env = p.env;
      r.env[kStopEventVariable] = stop_name;
      r.cwd = p.cwd;
      r.cpu_affinity = p.cpu_affinity;
      requests.push_back(std::move(r));
    }
    auto streams = OpenStreams(specs, options);
    if (!streams.ok()) return streams.status();

    auto shared = std::make_shared<Shared>();
    shared->on_exit = options.on_exit;
    shared->wake.reset(CreateEventW(nullptr, TRUE, FALSE, nullptr));
    shared->stop_event.reset(
        CreateEventW(nullptr, TRUE, FALSE, Widen(stop_name).c_str()));
    if (!shared->wake.valid() || !shared->stop_event.valid()) {
      return absl::InternalError(
          absl::StrCat("CreateEvent: ", LastErrorText()));
    }
    std::vector<ProcState> procs;
    std::vector<int> pids;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto spawned = SpawnInJob(requests[i]);
      if (!spawned.ok()) {
        // Nothing is left running: each job dies with its last handle.
        for (ProcState& p : procs) {
          TerminateJobObject(p.job.get(), kKilledExitCode);
          WaitForSingleObject(p.process.get(), 10000);
        }
        return spawned.status();
      }
      ProcState p;
      p.name = requests[i].name;
      p.pid = spawned->pid;
      p.process = std::move(spawned->process);
      p.job = std::move(spawned->job);
      (*streams)[2 * i].pipe = std::move(spawned->stdout_r);
      (*streams)[2 * i + 1].pipe = std::move(spawned->stderr_r);
      pids.push_back(p.pid);
      procs.push_back(std::move(p));
      MUSTER_LOG(DEBUG) << "started " << requests[i].name
                        << " pid=" << pids.back();
    }
    {
      absl::MutexLock lock(&shared->mu);
      shared->procs = std::move(procs);
      shared->unrecorded = static_cast<int>(pids.size());
    }
    auto group = std::make_unique<WindowsProcessGroup>(shared, pids);
    group->StartThreads(*std::move(streams));
    return std::unique_ptr<ProcessGroup>(std::move(group));
  }
};

}  // namespace
}  // namespace muster::platform::windows

namespace muster::platform {

ProcessLauncher* ProcessLauncher::Default() {
  static ProcessLauncher* launcher = new windows::WindowsLauncher();
  return launcher;
}

}  // namespace muster::platform
