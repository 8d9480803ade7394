#include "platform/posix/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/platform/logging.h"

namespace muster::platform::posix {
namespace {

// How long a child may take from fork to a successful execve before Start gives
// up on it.
constexpr absl::Duration kExecTimeout = absl::Seconds(30);

// What a child reports back through its CLOEXEC pipe when it cannot exec.
// Nothing arrives (EOF) when execve succeeded.
struct ChildReport {
  int stage;
  int err;
};
enum ChildStage : int {
  kStageSetpgid = 1,
  kStagePdeathsig,
  kStageDup,
  kStageExec,
  kStageAffinity,
  kStageChdir,
};

const char* StageName(int stage) {
  switch (stage) {
    case kStageSetpgid:
      return "setpgid";
    case kStagePdeathsig:
      return "prctl(PR_SET_PDEATHSIG)";
    case kStageDup:
      return "dup2";
    case kStageAffinity:
      return "sched_setaffinity (--numa-binding)";
    case kStageChdir:
      return "chdir to the working directory";
    default:
      return "execve";
  }
}

// Everything the child needs, prepared before fork: after fork in a
// multithreaded process only async-signal-safe calls are allowed (no
// allocation, no locks).
struct ChildArgs {
  const char* program;
  char* const* argv;
  char* const* envp;
  pid_t agent_pid;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  int report_fd;
  const cpu_set_t* affinity;  // nullptr: keep the agent's
  const char* cwd;            // nullptr: keep the agent's
};

[[noreturn]] void ChildFail(int report_fd, int stage, int err) {
  ChildReport r{stage, err};
  ssize_t ignored = write(report_fd, &r, sizeof(r));
  (void)ignored;
  _exit(127);
}

// Makes `from` the descriptor `to`, without FD_CLOEXEC.
bool MoveFd(int from, int to) {
  if (from == to) return fcntl(to, F_SETFD, 0) == 0;
  return dup2(from, to) == to;
}

[[noreturn]] void ChildExec(const ChildArgs& a) {
  // Own process group: Stop signals the worker and everything it starts as a
  // unit, and a Ctrl-C on the terminal reaches the agent only (it forwards).
  if (setpgid(0, 0) != 0) ChildFail(a.report_fd, kStageSetpgid, errno);
  // Die with the agent (the thread that forked us), even when it is SIGKILLed.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    ChildFail(a.report_fd, kStagePdeathsig, errno);
  // The agent may have died before the prctl above: then no signal will ever
  // come.
  if (getppid() != a.agent_pid) _exit(127);
  if (a.affinity != nullptr &&
      sched_setaffinity(0, sizeof(cpu_set_t), a.affinity) != 0) {
    ChildFail(a.report_fd, kStageAffinity, errno);
  }
  if (a.cwd != nullptr && chdir(a.cwd) != 0)
    ChildFail(a.report_fd, kStageChdir, errno);
  // The agent's signal dispositions and mask are not the worker's business.
  // Handlers reset on exec anyway; ignored signals (SIGPIPE, often) would not.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig)
    sigaction(sig, &dfl, nullptr);  // fails harmlessly
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (!MoveFd(a.stdin_fd, 0) || !MoveFd(a.stdout_fd, 1) ||
      !MoveFd(a.stderr_fd, 2)) {
    ChildFail(a.report_fd, kStageDup, errno);
  }
  // Descriptors the agent opened without O_CLOEXEC (sockets of other libraries)
  // must not leak into workers. Best effort: needs Linux 5.11.
  syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
  execve(a.program, a.argv, a.envp);
  ChildFail(a.report_fd, kStageExec, errno);
}

std::string ExecErrorText(const ProcessSpec& spec, const std::string& name,
                          const std::string& program, const ChildReport& r) {
  const std::string& argv0 = spec.argv[0];
  std::string what = absl::StrCat("cannot start ", name, ": ");
  if (r.stage != kStageExec) {
    return absl::StrCat(what, StageName(r.stage),
                        " failed: ", ErrnoText(r.err));
  }
  switch (r.err) {
    case ENOENT:
      return absl::StrCat(
          what, "'", argv0, "' (", program,
          "): No such file or directory; if it is a script, check the "
          "interpreter on its #! line");
    case EACCES:
      return absl::StrCat(what, "'", argv0, "' (", program,
                          ") is not executable: permission denied; ",
                          NotExecutableHint(argv0));
    case ENOEXEC:
      return absl::StrCat(
          what, "'", argv0, "' (", program,
          ") is not a program for this machine and has no #! line; give the "
          "interpreter (e.g. python ",
          argv0, ") or add a #! line");
    default:
      return absl::StrCat(what, "execve '", program,
                          "' failed: ", ErrnoText(r.err));
  }
}

}  // namespace

std::string NotExecutableHint(const std::string& argv0) {
  std::string hint = absl::StrCat("run 'chmod +x ", argv0, "'");
  if (argv0.size() > 3 && argv0.compare(argv0.size() - 3, 3, ".py") == 0) {
    absl::StrAppend(&hint, ", or run it with python (leave out --no-python)");
  } else {
    absl::StrAppend(&hint, ", or run it through its interpreter");
  }
  return hint;
}

void KillAndReap(int pid, absl::Duration timeout) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);  // in case it never got to setpgid
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int st;
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;
    if (absl::Now() >= deadline) {
      MUSTER_LOG(ERROR) << "process " << pid << " did not die within "
                        << absl::FormatDuration(timeout)
                        << " of SIGKILL; leaving it";
      return;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::StatusOr<Spawned> SpawnProcess(const ProcessSpec& spec,
                                     const std::string& program,
                                     const std::string& name) {
  int out[2], err[2], report[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  UniqueFd err_r(err[0]), err_w(err[1]);
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  UniqueFd report_r(report[0]), report_w(report[1]);
  // Workers read nothing from the agent's stdin: in a background process group
  // a read from the terminal would stop them (SIGTTIN), and several workers
  // cannot share one input.
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.get() < 0) {
    return absl::InternalError(
        absl::StrCat("open /dev/null: ", ErrnoText(errno)));
  }

  std::vector<std::string> env_strings;
  env_strings.reserve(spec.env.size());
  for (const auto& [k, v] : spec.env)
    env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  cpu_set_t affinity;
  CPU_ZERO(&affinity);
  for (int cpu : spec.cpu_affinity) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &affinity);
  }
  ChildArgs args{program.c_str(),
                 argv.data(),
                 envp.data(),
                 getpid(),
                 devnull.get(),
                 out_w.get(),
                 err_w.get(),
                 report_w.get(),
                 spec.cpu_affinity.empty() ? nullptr : &affinity,
                 spec.cwd.empty() ? nullptr : spec.cwd.c_str()};
  const pid_t pid = fork();
  if (pid < 0)
    return absl::InternalError(absl::StrCat("fork: ", ErrnoText(errno)));
  if (pid == 0) ChildExec(args);

  // Also from the parent, so that the group exists before anyone signals it
  // (the classic race between a shell and its job). EACCES after the child's
  // execve is fine: it did it itself.
  setpgid(pid, pid);
  out_w.reset();
  err_w.reset();
  report_w.reset();

  ChildReport r{};
  size_t got = 0;
  const absl::Time deadline = absl::Now() + kExecTimeout;
  while (got < sizeof(r)) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      KillAndReap(pid, kKillReapTimeout);
      return absl::InternalError(absl::StrCat(
          name, " ('", spec.argv[0], "') did not reach execve within ",
          absl::FormatDuration(kExecTimeout)));
    }
    pollfd p{report_r.get(), POLLIN, 0};
    const int pr =
        poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (pr < 0 && errno != EINTR) {
      const int e = errno;
      KillAndReap(pid, kKillReapTimeout);
      return absl::InternalError(absl::StrCat("poll: ", ErrnoText(e)));
    }
    if (pr <= 0) continue;
    const ssize_t n = read(report_r.get(), reinterpret_cast<char*>(&r) + got,
                           sizeof(r) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      break;  // EOF: execve succeeded (or the child died before reporting)
    got += static_cast<size_t>(n);
  }
  if (got == sizeof(r)) {
    KillAndReap(pid,
                kKillReapTimeout);  // it has _exit'ed already; this reaps it
    absl::Status s =
        absl::FailedPreconditionError(ExecErrorText(spec, name, program, r));
    if (r.stage != kStageExec) s = absl::InternalError(s.message());
    return s;
  }
  Spawned spawned;
  spawned.pid = pid;
  spawned.stdout_r = std::move(out_r);
  spawned.stderr_r = std::move(err_r);
  return spawned;
}

}  // namespace muster::platform::posix
