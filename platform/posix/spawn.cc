#include "platform/posix/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/platform/logging.h"

namespace muster::platform::posix {
namespace {

// How long a child may take from clone to a successful execve before Start
// gives up on it.
constexpr absl::Duration kExecTimeout = absl::Seconds(30);

// The child's stack: it makes a few system calls and execve.
constexpr size_t kChildStackSize = 64 * 1024;

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

// System calls for the child, which runs on the launcher's memory (CLONE_VM)
// while the launcher's threads run on: they return -errno and touch nothing
// but registers, where libc's wrappers would write errno into the cloning
// thread's TLS (which that thread is using) and a sanitizer's interceptors
// would record into shared state. Elsewhere libc's syscall() and a vfork-style
// wait (CLONE_VFORK: the launcher is suspended, so errno is not in use).
#if defined(__x86_64__)
constexpr bool kRawSyscalls = true;
long ChildSyscall(long n, long a = 0, long b = 0, long c = 0, long d = 0,
                  long e = 0) {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
               : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
constexpr bool kRawSyscalls = true;
long ChildSyscall(long n, long a = 0, long b = 0, long c = 0, long d = 0,
                  long e = 0) {
  register long x8 asm("x8") = n;
  register long x0 asm("x0") = a;
  register long x1 asm("x1") = b;
  register long x2 asm("x2") = c;
  register long x3 asm("x3") = d;
  register long x4 asm("x4") = e;
  asm volatile("svc 0"
               : "+r"(x0)
               : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
               : "memory");
  return x0;
}
#else
constexpr bool kRawSyscalls = false;
long ChildSyscall(long n, long a = 0, long b = 0, long c = 0, long d = 0,
                  long e = 0) {
  const long r = syscall(n, a, b, c, d, e);
  return r < 0 ? -errno : r;
}
#endif

// The kernel's struct sigaction (rt_sigaction): glibc's differs in layout.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

// Everything the child needs, prepared before clone (no allocation, no locks
// after it). A failure goes to `stage`/`err`, which the launcher reads once
// the report pipe reaches EOF: the child has then exec'd (the pipe is
// close-on-exec) or exited, and no longer uses our memory either way (the
// kernel lets go of the old memory before it closes descriptors).
struct ChildArgs {
  const char* program;
  char* const* argv;
  char* const* envp;
  pid_t agent_pid;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  const cpu_set_t* affinity;  // nullptr: keep the agent's
  const char* cwd;            // nullptr: keep the agent's
  volatile int stage = 0;     // 0: execve succeeded
  volatile int err = 0;
};

[[noreturn]] void ChildFail(ChildArgs* a, int stage, long ret) {
  a->err = static_cast<int>(-ret);
  a->stage = stage;
  while (true) ChildSyscall(SYS_exit_group, 127);
}

// Makes `from` the descriptor `to`, without FD_CLOEXEC.
long MoveFd(int from, int to) {
  if (from == to) return ChildSyscall(SYS_fcntl, to, F_SETFD, 0);
  const long r = ChildSyscall(SYS_dup3, from, to, 0);
  return r < 0 ? r : 0;
}

__attribute__((no_sanitize("address", "thread", "undefined"))) int ChildMain(
    void* arg) {
  ChildArgs* a = static_cast<ChildArgs*>(arg);
  long r;
  // Own process group: Stop signals the worker and everything it starts as a
  // unit, and a Ctrl-C on the terminal reaches the agent only (it forwards).
  if ((r = ChildSyscall(SYS_setpgid, 0, 0)) != 0)
    ChildFail(a, kStageSetpgid, r);
  // Die with the agent (the thread that started us), even when it is
  // SIGKILLed.
  if ((r = ChildSyscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL)) != 0)
    ChildFail(a, kStagePdeathsig, r);
  // The agent may have died before the prctl above: then no signal will ever
  // come.
  if (ChildSyscall(SYS_getppid) != a->agent_pid)
    while (true) ChildSyscall(SYS_exit_group, 127);
  if (a->affinity != nullptr &&
      (r = ChildSyscall(SYS_sched_setaffinity, 0, sizeof(cpu_set_t),
                        reinterpret_cast<long>(a->affinity))) != 0) {
    ChildFail(a, kStageAffinity, r);
  }
  if (a->cwd != nullptr &&
      (r = ChildSyscall(SYS_chdir, reinterpret_cast<long>(a->cwd))) != 0) {
    ChildFail(a, kStageChdir, r);
  }
  // The agent's signal dispositions are not the worker's business. Handlers
  // reset on exec anyway; ignored signals (SIGPIPE, often) would not. The
  // launcher blocked every signal around clone so that none of its handlers
  // runs here, on memory it shares; the worker starts with an empty mask.
  KernelSigaction dfl{};  // SIG_DFL, no flags, an empty mask
  for (int sig = 1; sig < NSIG; ++sig) {
    ChildSyscall(SYS_rt_sigaction, sig, reinterpret_cast<long>(&dfl), 0,
                 sizeof(uint64_t));
  }
  const uint64_t none = 0;
  ChildSyscall(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&none),
               0, sizeof(none));
  if ((r = MoveFd(a->stdin_fd, 0)) != 0 || (r = MoveFd(a->stdout_fd, 1)) != 0 ||
      (r = MoveFd(a->stderr_fd, 2)) != 0) {
    ChildFail(a, kStageDup, r);
  }
  // Descriptors the agent opened without O_CLOEXEC (sockets of other libraries)
  // must not leak into workers. Best effort: needs Linux 5.11.
  ChildSyscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
  r = ChildSyscall(SYS_execve, reinterpret_cast<long>(a->program),
                   reinterpret_cast<long>(a->argv),
                   reinterpret_cast<long>(a->envp));
  ChildFail(a, kStageExec, r);
}

std::string ExecErrorText(const ProcessSpec& spec, const std::string& name,
                          const std::string& program, int stage, int err) {
  const std::string& argv0 = spec.argv[0];
  std::string what = absl::StrCat("cannot start ", name, ": ");
  if (stage != kStageExec) {
    return absl::StrCat(what, StageName(stage), " failed: ", ErrnoText(err));
  }
  switch (err) {
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
                          "' failed: ", ErrnoText(err));
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

// What a started child needs until it has exec'd: its arguments, the strings
// they point into and its stack. Not movable: the child reads it.
struct PendingSpawn {
  PendingSpawn() = default;
  PendingSpawn(const PendingSpawn&) = delete;
  PendingSpawn& operator=(const PendingSpawn&) = delete;
  ~PendingSpawn() {
    // Only once the child is past using it (exec'd, exited or reaped).
    if (stack != nullptr) munmap(stack, kChildStackSize);
  }

  const ProcessSpec* spec = nullptr;
  std::string program;
  std::string name;
  std::vector<std::string> env_strings;
  std::vector<std::string> argv_strings;
  std::vector<char*> envp;
  std::vector<char*> argv;
  cpu_set_t affinity;
  ChildArgs args{};
  void* stack = nullptr;
  int pid = -1;
  UniqueFd stdout_r, stderr_r, report_r;
};

void PendingDeleter::operator()(PendingSpawn* p) const {
  if (p->pid > 0) KillAndReap(p->pid, kKillReapTimeout);
  delete p;
}

int PendingPid(const PendingSpawn& p) { return p.pid; }

absl::StatusOr<Pending> StartSpawn(const ProcessSpec& spec,
                                   const std::string& program,
                                   const std::string& name) {
  Pending p(new PendingSpawn());
  p->spec = &spec;
  p->program = program;
  p->name = name;
  int out[2], err[2], report[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  p->stdout_r.reset(out[0]);
  UniqueFd out_w(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  p->stderr_r.reset(err[0]);
  UniqueFd err_w(err[1]);
  // EOF on it: the child has exec'd or exited (see ChildArgs).
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  p->report_r.reset(report[0]);
  UniqueFd report_w(report[1]);
  // Workers read nothing from the agent's stdin: in a background process group
  // a read from the terminal would stop them (SIGTTIN), and several workers
  // cannot share one input.
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.get() < 0) {
    return absl::InternalError(
        absl::StrCat("open /dev/null: ", ErrnoText(errno)));
  }

  p->env_strings.reserve(spec.env.size());
  for (const auto& [k, v] : spec.env)
    p->env_strings.push_back(absl::StrCat(k, "=", v));
  for (auto& s : p->env_strings) p->envp.push_back(s.data());
  p->envp.push_back(nullptr);
  p->argv_strings = spec.argv;
  for (auto& s : p->argv_strings) p->argv.push_back(s.data());
  p->argv.push_back(nullptr);

  CPU_ZERO(&p->affinity);
  for (int cpu : spec.cpu_affinity) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &p->affinity);
  }
  ChildArgs& a = p->args;
  a.program = p->program.c_str();
  a.argv = p->argv.data();
  a.envp = p->envp.data();
  a.agent_pid = getpid();
  a.stdin_fd = devnull.get();
  a.stdout_fd = out_w.get();
  a.stderr_fd = err_w.get();
  a.affinity = spec.cpu_affinity.empty() ? nullptr : &p->affinity;
  a.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  p->stack = mmap(nullptr, kChildStackSize, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (p->stack == MAP_FAILED) {
    p->stack = nullptr;
    return absl::InternalError(
        absl::StrCat("mmap (a stack to start ", name, "): ", ErrnoText(errno)));
  }
  // Like posix_spawn: the child borrows our memory instead of copying the page
  // tables of a large, multithreaded launcher (a fork cost ~1.5 ms per worker
  // here), and we do not wait for its execve here: Start starts every worker,
  // then FinishSpawn collects each one's outcome. No signal handler of ours
  // may run in the child before it has reset them: block all meanwhile.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int flags = CLONE_VM | SIGCHLD | (kRawSyscalls ? 0 : CLONE_VFORK);
  const pid_t pid =
      clone(ChildMain, static_cast<char*>(p->stack) + kChildStackSize, flags,
            &p->args);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("clone: ", ErrnoText(clone_errno)));
  }
  p->pid = pid;
  // Also from here, so that the group exists before anyone signals it (the
  // classic race between a shell and its job). EACCES after the child's
  // execve is fine: it did it itself.
  setpgid(pid, pid);
  return p;
}

absl::StatusOr<Spawned> FinishSpawn(Pending p) {
  const absl::Time deadline = absl::Now() + kExecTimeout;
  while (true) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::InternalError(absl::StrCat(
          p->name, " ('", p->spec->argv[0], "') did not reach execve within ",
          absl::FormatDuration(kExecTimeout)));  // the deleter kills it
    }
    pollfd pfd{p->report_r.get(), POLLIN, 0};
    const int pr =
        poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (pr < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno)));
    }
    if (pr <= 0) continue;
    char c;
    const ssize_t n = read(p->report_r.get(), &c, 1);
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF (nothing is ever written): exec'd or exited
  }
  if (p->args.stage != 0) {
    const std::string text = ExecErrorText(*p->spec, p->name, p->program,
                                           p->args.stage, p->args.err);
    if (p->args.stage != kStageExec) return absl::InternalError(text);
    return absl::FailedPreconditionError(text);  // the deleter reaps it
  }
  Spawned spawned;
  spawned.pid = std::exchange(p->pid, -1);
  spawned.stdout_r = std::move(p->stdout_r);
  spawned.stderr_r = std::move(p->stderr_r);
  return spawned;
}

}  // namespace muster::platform::posix
