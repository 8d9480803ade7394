// POSIX ProcessLauncher: vfork-style clone/exec of each process (spawn.cc) into
// its own process group, one reader thread for all output pipes, one reaper
// thread that waits for exactly our pids (pidfds, polling as a fallback), and
// Stop as signal -> grace -> SIGKILL -> reap -> drain.
//
// clang-format off
//   ProcessGroup ──shared_ptr──► Shared (procs, exits, flags; one mutex)
//     │                            ▲            ▲
//     ├─ reader thread ────────────┘            │   pipes → lines → console,
//     │   (output_reader.cc)                    │   log files, filtered files
//     └─ reaper thread ─────────────────────────┘   pidfds → waitpid → exits
// clang-format on
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "muster/platform/env.h"
#include "muster/platform/logging.h"
#include "muster/platform/process.h"
#include "platform/posix/output_reader.h"
#include "platform/posix/spawn.h"
#include "platform/src/group_skeleton.h"
#include "platform/src/process_plan.h"

namespace muster::platform::posix {
namespace {

// After every process is reaped, how long Stop lets the reader drain the pipes
// to EOF. A grandchild outside the process group may hold a pipe open for
// ever.
constexpr absl::Duration kDrainTimeout = absl::Seconds(2);

// Records how process `index` ended.
void RecordExit(Shared& shared, size_t index, int wait_status, bool lost) {
  ProcessExit exit;
  {
    absl::MutexLock lock(&shared.mu);
    const ProcState& p = shared.procs[index];
    exit.index = index;
    exit.pid = p.pid;
    exit.kill_reason = p.kill_reason;
  }
  exit.end_time = absl::Now();
  if (lost) {
    // Someone else reaped it: we cannot know how it ended; count a failure.
    exit.exit_code = -1;
  } else if (WIFSIGNALED(wait_status)) {
    exit.exit_code = -1;
    exit.signal = WTERMSIG(wait_status);
  } else {
    exit.exit_code = WEXITSTATUS(wait_status);
  }
  absl::MutexLock lock(&shared.mu);
  ProcState& p = shared.procs[index];
  p.exit = std::move(exit);
  p.recorded = true;
  --shared.unrecorded;
  if (!p.exit.succeeded()) shared.any_failed = true;
}

void ReaperLoop(std::shared_ptr<Shared> shared, std::vector<int> pidfds) {
  BlockSignalsInThisThread();
  // pidfds[i] < 0: no pidfd for worker i (old kernel): poll for it on a short
  // timer.
  std::vector<size_t> to_record;
  std::vector<int> statuses;
  std::vector<bool> lost;
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    bool need_timer = false;
    {
      absl::MutexLock lock(&shared->mu);
      for (size_t i = 0; i < shared->procs.size(); ++i) {
        if (shared->procs[i].reaped) continue;
        if (pidfds[i] >= 0) {
          fds.push_back({pidfds[i], POLLIN, 0});
        } else {
          need_timer = true;
        }
      }
      if (fds.empty() && !need_timer) break;
    }
    // The timeout is a safety net even with pidfds.
    const int pr = poll(fds.data(), fds.size(), need_timer ? 20 : 1000);
    if (pr < 0 && errno != EINTR) absl::SleepFor(absl::Milliseconds(20));
    to_record.clear();
    statuses.clear();
    lost.clear();
    {
      // waitpid under the lock: Signal() checks `reaped` under it before
      // kill(), so it never signals a pid the kernel has already handed to
      // someone else.
      absl::MutexLock lock(&shared->mu);
      for (size_t i = 0; i < shared->procs.size(); ++i) {
        ProcState& w = shared->procs[i];
        if (w.reaped) continue;
        // A ptrace stop (the agent reading this worker's stacks,
        // posix/stack_reader.cc) is reported by waitpid to every thread of
        // the tracer's process, even without WUNTRACED. So peek first,
        // consuming nothing, and reap only an exit (a zombie stays one): a
        // stop is the tracer's, which waits for it.
        siginfo_t peek{};
        const int peeked = waitid(P_PID, static_cast<id_t>(w.pid), &peek,
                                  WEXITED | WNOHANG | WNOWAIT);
        if (peeked == 0 && (peek.si_pid == 0 || (peek.si_code != CLD_EXITED &&
                                                 peek.si_code != CLD_KILLED &&
                                                 peek.si_code != CLD_DUMPED))) {
          continue;  // running, or stopped by a tracer
        }
        int st = 0;
        const pid_t r = waitpid(w.pid, &st, WNOHANG);
        if (r == w.pid || (r < 0 && errno == ECHILD)) {
          w.reaped = true;
          if (r < 0) {
            MUSTER_LOG(ERROR)
                << "process " << w.pid
                << " was reaped by someone else (waitpid(-1) elsewhere in this "
                   "program?); its exit status is unknown";
          }
          to_record.push_back(i);
          statuses.push_back(st);
          lost.push_back(r < 0);
          if (pidfds[i] >= 0) {
            close(pidfds[i]);
            pidfds[i] = -1;
          }
        }
      }
    }
    for (size_t k = 0; k < to_record.size(); ++k) {
      RecordExit(*shared, to_record[k], statuses[k], lost[k]);
    }
    if (!to_record.empty() && shared->on_exit) shared->on_exit();
  }
  for (int fd : pidfds) {
    if (fd >= 0) close(fd);
  }
  absl::MutexLock lock(&shared->mu);
  shared->reaper_done = true;
}

}  // namespace

// -----------------------------------------------------------------------------

class PosixProcessGroup : public internal::GroupSkeleton<Shared> {
 public:
  PosixProcessGroup(std::shared_ptr<Shared> shared, std::vector<int> pids)
      : GroupSkeleton(std::move(shared), std::move(pids), "sending SIGKILL",
                      kKillReapTimeout) {}

  ~PosixProcessGroup() override {
    if (!stopped()) Stop(SIGTERM, absl::Seconds(5));
  }

  // Returns false when a thread could not be created; the caller then kills and
  // reaps the workers itself (see Start).
  bool StartThreads(std::vector<Stream> streams, std::vector<int> pidfds) {
    try {
      reader_ = std::thread(ReaderLoop, shared_, std::move(streams));
    } catch (const std::system_error& e) {
      MUSTER_LOG(ERROR) << "cannot start the worker output reader: "
                        << e.what();
      absl::MutexLock lock(&shared_->mu);
      shared_->reader_done = true;  // nothing to wait for
      return false;
    }
    try {
      reaper_ = std::thread(ReaperLoop, shared_, std::move(pidfds));
    } catch (const std::system_error& e) {
      MUSTER_LOG(ERROR) << "cannot start the worker reaper: " << e.what();
      return false;
    }
    return true;
  }

  // For Start's failure path: every worker was killed and reaped by the caller,
  // with no reaper thread running.
  void MarkAllReaped() {
    absl::MutexLock lock(&shared_->mu);
    for (ProcState& w : shared_->procs) {
      w.reaped = true;
      w.recorded = true;
    }
    shared_->unrecorded = 0;
    shared_->reaper_done = true;
  }

  void Signal(int signal) override {
    SignalGroups(signal, /*include_reaped=*/false);
  }

  bool Kill(size_t index, const std::string& reason) override {
    absl::MutexLock lock(&shared_->mu);
    if (index >= shared_->procs.size()) return false;
    ProcState& w = shared_->procs[index];
    if (w.reaped) return false;
    w.kill_reason = reason;
    // SIGKILL works on a stopped (SIGSTOP) or wedged process too.
    if (kill(-w.pid, SIGKILL) != 0 && errno == ESRCH) kill(w.pid, SIGKILL);
    return true;
  }

 private:
  void AskToStop(int signal) override {
    SignalGroups(signal, /*include_reaped=*/true);
  }
  void KillAll() override { SignalGroups(SIGKILL, /*include_reaped=*/true); }

  // include_reaped: also the groups of workers already reaped, for what they
  // left behind.
  void SignalGroups(int signal, bool include_reaped) {
    absl::MutexLock lock(&shared_->mu);
    for (const ProcState& w : shared_->procs) {
      if (w.reaped && !include_reaped) continue;
      if (kill(-w.pid, signal) != 0 && errno == ESRCH && !w.reaped) {
        kill(w.pid, signal);  // not (yet) a group leader
      }
    }
  }

  void FinishThreads() override {
    Shared* s = shared_.get();
    auto reader_done = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->reader_done;
    };
    bool drained;
    {
      absl::MutexLock lock(&s->mu);
      drained =
          s->mu.AwaitWithTimeout(absl::Condition(&reader_done), kDrainTimeout);
    }
    if (!drained) {
      // Someone outside the workers' groups still holds a pipe: stop waiting
      // for EOF.
      MUSTER_LOG(WARNING)
          << "worker output not drained " << absl::FormatDuration(kDrainTimeout)
          << " after the workers ended (a daemon holding their pipes, or a "
             "console nobody reads); giving up on it";
      s->reader_quit.store(true);
      uint64_t one = 1;
      ssize_t ignored = write(s->reader_wake_fd, &one, sizeof(one));
      (void)ignored;
      absl::MutexLock lock(&s->mu);
      drained = s->mu.AwaitWithTimeout(absl::Condition(&reader_done),
                                       absl::Seconds(1));
    }
    bool reaped;
    {
      absl::MutexLock lock(&s->mu);
      reaped = s->reaper_done;
    }
    // A thread that finished is joined; one stuck (a console nobody reads, a
    // process that cannot die) is let go: it holds its own reference to the
    // shared state.
    if (reader_.joinable()) drained ? reader_.join() : reader_.detach();
    if (reaper_.joinable()) reaped ? reaper_.join() : reaper_.detach();
    if (!drained)
      MUSTER_LOG(ERROR) << "worker output reader is stuck writing; leaving it";
  }

  std::thread reader_;
  std::thread reaper_;
};

namespace {

// Reads `name` from the environment a process will get, falling back to ours.
std::string EnvOr(const std::map<std::string, std::string>& env,
                  const std::string& name) {
  auto it = env.find(name);
  if (it != env.end()) return it->second;
  return GetEnv(name).value_or("");
}

class PosixLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<ProcessGroup>> Start(
      std::vector<ProcessSpec> specs, LaunchOptions options) override;
};

absl::StatusOr<std::unique_ptr<ProcessGroup>> PosixLauncher::Start(
    std::vector<ProcessSpec> specs, LaunchOptions options) {
  auto checked = internal::CheckSpecs(specs);
  if (!checked.ok()) return checked.status();
  const std::vector<std::string> names = *std::move(checked);
  std::vector<std::string> programs;
  for (const ProcessSpec& p : specs) {
    auto program = FindExecutable(p.argv[0], EnvOr(p.env, "PATH"));
    if (!program.ok()) return program.status();
    programs.push_back(*std::move(program));
  }

  // Log files and console routing, before anything runs.
  auto shared = std::make_shared<Shared>();
  shared->on_exit = options.on_exit;
  std::shared_ptr<UniqueFd> filtered[2];
  // Shared with the reader thread, which outlives `options`.
  const std::shared_ptr<const std::vector<std::string>> filters[2] = {
      std::make_shared<const std::vector<std::string>>(options.stdout_filters),
      std::make_shared<const std::vector<std::string>>(options.stderr_filters)};
  for (int k = 0; k < 2; ++k) {
    const std::string file_name = internal::FilteredFile(options, k == 1);
    if (file_name.empty()) continue;
    auto file = OpenLogFile(file_name);
    if (!file.ok()) return file.status();
    filtered[k] = std::make_shared<UniqueFd>(std::move(*file));
  }
  std::vector<Stream> streams;
  for (const internal::StreamPlan& plan :
       internal::PlanStreams(specs, options)) {
    Stream s;
    s.proc_index = plan.proc_index;
    s.is_stderr = plan.is_stderr;
    s.shared = shared.get();
    if (plan.filtered) {
      s.filtered = filtered[plan.is_stderr];
      s.filters = filters[plan.is_stderr];
    }
    s.prefix = plan.prefix;
    s.console_fd = plan.console_fd;
    if (!plan.file.empty()) {
      auto file = OpenLogFile(plan.file);
      if (!file.ok()) return file.status();
      s.file = *std::move(file);
      s.file_name = plan.file;
    }
    streams.push_back(std::move(s));
  }

  shared->reader_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (shared->reader_wake_fd < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", ErrnoText(errno)));
  }

  std::vector<int> pids;
  std::vector<int> pidfds;
  auto undo = [&pids, &pidfds]() {
    for (int pid : pids) KillAndReap(pid, kKillReapTimeout);
    for (int fd : pidfds) {
      if (fd >= 0) close(fd);
    }
  };
  // Every process is started before any is waited for: each start costs the
  // launcher only a clone, and their execs run side by side.
  std::vector<Pending> pending;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto started = StartSpawn(specs[i], programs[i], names[i]);
    if (!started.ok()) return started.status();  // `pending` kills the others
    pending.push_back(*std::move(started));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    auto spawned = FinishSpawn(std::move(pending[i]));
    if (!spawned.ok()) {
      pending.clear();  // kills and reaps those not yet confirmed
      undo();
      return spawned.status();
    }
    pids.push_back(spawned->pid);
    // A pidfd lets the reaper sleep in poll() until exactly our processes exit.
    // (It is close-on-exec by default.) -1 on kernels before 5.3: the reaper
    // then polls.
    pidfds.push_back(
        static_cast<int>(syscall(SYS_pidfd_open, spawned->pid, 0)));
    for (int k = 0; k < 2; ++k) {
      Stream& s = streams[2 * i + k];
      s.fd = std::move(k == 0 ? spawned->stdout_r : spawned->stderr_r);
      fcntl(s.fd.get(), F_SETFL, fcntl(s.fd.get(), F_GETFL) | O_NONBLOCK);
    }
    MUSTER_LOG(DEBUG) << "started " << names[i] << " pid=" << spawned->pid;
  }

  {
    absl::MutexLock lock(&shared->mu);
    for (size_t i = 0; i < specs.size(); ++i) {
      ProcState w;
      w.spec = std::move(specs[i]);
      w.name = names[i];
      w.pid = pids[i];
      shared->procs.push_back(std::move(w));
    }
    shared->unrecorded = static_cast<int>(pids.size());
  }
  auto group = std::make_unique<PosixProcessGroup>(shared, pids);
  if (!group->StartThreads(std::move(streams), std::move(pidfds))) {
    // Without its threads the group cannot be watched: take it down here (the
    // reaper is not running, so nobody else reaps) and let the group's Stop
    // find everything ended.
    for (int pid : pids) KillAndReap(pid, kKillReapTimeout);
    group->MarkAllReaped();
    return absl::InternalError(
        "cannot start the process group's threads; see the log");
  }
  return std::unique_ptr<ProcessGroup>(std::move(group));
}

}  // namespace
}  // namespace muster::platform::posix

namespace muster::platform {

ProcessLauncher* ProcessLauncher::Default() {
  static ProcessLauncher* launcher = new posix::PosixLauncher();
  return launcher;
}

}  // namespace muster::platform
