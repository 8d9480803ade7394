// POSIX WorkerGroup: fork/exec of each worker into its own process group, one
// reader thread for all output pipes, one reaper thread that waits for exactly
// our pids (pidfds, polling as a fallback), and Stop as signal -> grace ->
// SIGKILL -> reap -> drain.
//
// Threads and ownership: the state shared with the two threads lives in
// `Shared`, held by shared_ptr from the group and from each thread. Stop waits
// for the threads with deadlines and detaches one that does not finish (a
// worker stuck in uninterruptible sleep, a console nobody reads), so neither
// Stop nor the destructor can hang, and a detached thread never touches freed
// memory.
#include "muster/agent/worker_group.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agent/src/posix/line_splitter.h"
#include "muster/common/logging.h"
#include "nlohmann/json.hpp"

namespace muster::agent {
namespace {

// Output pieces: lines longer than this reach the console and the files in
// pieces.
constexpr size_t kMaxLine = 64 * 1024;
// How long a child may take from fork to a successful execve before Start gives
// up on it.
constexpr absl::Duration kExecTimeout = absl::Seconds(30);
// After SIGKILL, how long Stop waits for the kernel to let the processes go (a
// process in uninterruptible sleep, e.g. on a dead NFS mount or in a GPU
// driver, may take longer).
constexpr absl::Duration kKillReapTimeout = absl::Seconds(10);
// After every worker is reaped, how long Stop lets the reader drain the pipes
// to EOF. A grandchild outside the worker's process group may hold a pipe open
// for ever.
constexpr absl::Duration kDrainTimeout = absl::Seconds(2);
// What execvp uses when PATH is unset.
constexpr char kDefaultPath[] = "/bin:/usr/bin";

// -----------------------------------------------------------------------------
// Small helpers.

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

std::string ErrnoText(int err) { return std::strerror(err); }

// Writes all of `data`, retrying on EINTR, short writes and (for a descriptor
// someone made non-blocking) EAGAIN. Returns false on a real error (EPIPE,
// ENOSPC, ...).
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
      continue;
    }
    return false;
  }
  return true;
}

int StreamsFor(const std::map<int, int>& by_rank, int local_rank) {
  auto it = by_rank.find(local_rank);
  if (it != by_rank.end()) return it->second;
  it = by_rank.find(-1);
  return it != by_rank.end() ? it->second : kStdNone;
}

bool IsExecutableFile(const std::string& path, int* err, bool* is_dir) {
  struct stat st;
  *is_dir = false;
  if (stat(path.c_str(), &st) != 0) {
    *err = errno;
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    *is_dir = true;
    *err = EACCES;
    return false;
  }
  if (access(path.c_str(), X_OK) != 0) {
    *err = errno;
    return false;
  }
  return true;
}

std::string NotExecutableHint(const std::string& argv0) {
  std::string hint = absl::StrCat("run 'chmod +x ", argv0, "'");
  if (argv0.size() > 3 && argv0.compare(argv0.size() - 3, 3, ".py") == 0) {
    absl::StrAppend(&hint, ", or run it with python (leave out --no-python)");
  } else {
    absl::StrAppend(&hint, ", or run it through its interpreter");
  }
  return hint;
}

// Reads `name` from the environment a worker will get, falling back to ours.
std::string EnvOr(const std::map<std::string, std::string>& env,
                  const std::string& name) {
  auto it = env.find(name);
  if (it != env.end()) return it->second;
  const char* v = getenv(name.c_str());
  return v != nullptr ? std::string(v) : std::string();
}

// -----------------------------------------------------------------------------
// Spawning.

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

std::string ExecErrorText(const WorkerSpec& spec, const std::string& program,
                          const ChildReport& r) {
  const std::string& argv0 = spec.argv[0];
  std::string what =
      absl::StrCat("cannot start worker local_rank ", spec.local_rank, ": ");
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

struct Spawned {
  pid_t pid = -1;
  UniqueFd stdout_r;
  UniqueFd stderr_r;
};

// Kills the process group of `pid` and reaps `pid`, waiting at most `timeout`.
void KillAndReap(pid_t pid, absl::Duration timeout) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);  // in case it never got to setpgid
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int st;
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;
    if (absl::Now() >= deadline) {
      MUSTER_LOG(ERROR) << "worker pid " << pid << " did not die within "
                        << absl::FormatDuration(timeout)
                        << " of SIGKILL; leaving it";
      return;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::StatusOr<Spawned> SpawnWorker(const WorkerSpec& spec,
                                    const std::string& program) {
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
                 spec.cpu_affinity.empty() ? nullptr : &affinity};
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
      return absl::InternalError(
          absl::StrCat("worker local_rank ", spec.local_rank, " ('",
                       spec.argv[0], "') did not reach execve within ",
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
        absl::FailedPreconditionError(ExecErrorText(spec, program, r));
    if (r.stage != kStageExec) s = absl::InternalError(s.message());
    return s;
  }
  Spawned spawned;
  spawned.pid = pid;
  spawned.stdout_r = std::move(out_r);
  spawned.stderr_r = std::move(err_r);
  return spawned;
}

// Opens a log file for writing, creating its directories.
absl::StatusOr<UniqueFd> OpenLogFile(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create log directory '", path.parent_path().string(),
        "': ", ec.message(), "; check --log-dir"));
  }
  UniqueFd fd(
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open log file '", path.string(),
                     "': ", ErrnoText(errno), "; check --log-dir"));
  }
  return fd;
}

// Blocks every asynchronous signal in the calling (helper) thread:
// process-directed signals are for the agent's own threads, and a SIGPIPE from
// writing to a closed console pipe becomes EPIPE.
void BlockSignalsInThisThread() {
  sigset_t all;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP})
    sigdelset(&all, sig);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

// -----------------------------------------------------------------------------
// State shared by the group and its threads.

struct WorkerState {
  WorkerSpec spec;
  pid_t pid = -1;
  bool reaped =
      false;  // waitpid returned it: its pid may be reused from now on
  bool recorded = false;  // `exit` is final
  WorkerExit exit;
  // Why the agent killed it (the watchdog), reported instead of its error file.
  std::string kill_reason;
  // Kept by the reader: see WorkerExit::last_stderr_line.
  std::string last_stderr_line;
};

struct Shared {
  ~Shared() {
    if (reader_wake_fd >= 0) close(reader_wake_fd);
  }

  absl::Mutex mu;
  std::vector<WorkerState> workers ABSL_GUARDED_BY(mu);
  int unrecorded ABSL_GUARDED_BY(mu) = 0;
  bool any_failed ABSL_GUARDED_BY(mu) = false;
  bool reaper_done ABSL_GUARDED_BY(mu) = false;
  bool reader_done ABSL_GUARDED_BY(mu) = false;

  // The reader stops waiting for EOF when this is set and it is woken through
  // the eventfd.
  std::atomic<bool> reader_quit{false};
  int reader_wake_fd = -1;  // const after construction; closed by ~Shared
};

// One output pipe of one worker, owned by the reader thread.
struct Stream {
  UniqueFd fd;
  int local_rank = 0;
  std::string prefix;  // "[rank3]:" or empty
  int console_fd = -1;
  UniqueFd file;
  internal::LineSplitter splitter{kMaxLine};
  bool file_broken = false;
  // The worker's index in Shared::workers, and whether this is its stderr
  // (whose last line is kept for the failure report).
  size_t worker_index = 0;
  bool is_stderr = false;
  Shared* shared = nullptr;  // outlives the reader (it holds a reference)
  // --duplicate-*-filters: matching lines also go to this shared file.
  std::shared_ptr<UniqueFd> filtered;
  std::shared_ptr<const std::vector<std::string>> filters;
};

void EmitLine(Stream& s, absl::string_view text, bool newline,
              std::string& buf) {
  if (s.is_stderr && s.shared != nullptr) {
    absl::string_view t = absl::StripAsciiWhitespace(text);
    if (!t.empty()) {
      absl::MutexLock lock(&s.shared->mu);
      s.shared->workers[s.worker_index].last_stderr_line =
          std::string(t.substr(0, 1024));
    }
  }
  if (s.filtered != nullptr && s.filters != nullptr) {
    for (const std::string& f : *s.filters) {
      if (text.find(f) == absl::string_view::npos) continue;
      buf.assign(s.prefix);
      buf.append(text.data(), text.size());
      buf.push_back('\n');
      // One write per line from the one reader thread: lines never mix.
      if (!WriteAll(s.filtered->get(), buf.data(), buf.size())) {
        s.filtered.reset();
      }
      break;
    }
  }
  if (s.console_fd >= 0) {
    // One write() per line: lines of different workers never mix, and a piece
    // of an over-long line or a partial last line still ends the console line.
    buf.assign(s.prefix);
    buf.append(text.data(), text.size());
    buf.push_back('\n');
    if (!WriteAll(s.console_fd, buf.data(), buf.size())) {
      // A console that went away (closed pipe) must not stop the workers or the
      // files.
      s.console_fd = -1;
    }
  }
  if (s.file.get() >= 0 && !s.file_broken) {
    // Files keep the worker's bytes exactly: no prefix, and a '\n' only where
    // it wrote one.
    buf.assign(text.data(), text.size());
    if (newline) buf.push_back('\n');
    if (!WriteAll(s.file.get(), buf.data(), buf.size())) {
      MUSTER_LOG(ERROR) << "writing the log file of local rank " << s.local_rank
                        << " failed: " << ErrnoText(errno)
                        << "; its further output is lost";
      s.file_broken = true;
    }
  }
}

void ReaderLoop(std::shared_ptr<Shared> shared, std::vector<Stream> streams) {
  BlockSignalsInThisThread();
  std::string buf;
  std::vector<char> chunk(kMaxLine);
  auto emit_for = [&buf](Stream& s) {
    return [&buf, &s](absl::string_view text, bool newline) {
      EmitLine(s, text, newline, buf);
    };
  };
  auto finish = [&](Stream& s) {
    s.splitter.Flush(emit_for(s));
    s.fd.reset();
    s.file.reset();
  };
  // Reads what is in `s` now. Returns false at EOF or on an error.
  auto read_once = [&](Stream& s) {
    while (true) {
      const ssize_t n = read(s.fd.get(), chunk.data(), chunk.size());
      if (n > 0) {
        s.splitter.Feed(absl::string_view(chunk.data(), static_cast<size_t>(n)),
                        emit_for(s));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
  };

  std::vector<pollfd> fds;
  std::vector<Stream*> polled;
  while (true) {
    fds.clear();
    polled.clear();
    fds.push_back({shared->reader_wake_fd, POLLIN, 0});
    for (Stream& s : streams) {
      if (s.fd.get() < 0) continue;
      fds.push_back({s.fd.get(), POLLIN, 0});
      polled.push_back(&s);
    }
    if (polled.empty()) break;
    if (shared->reader_quit.load()) {
      // Told to stop waiting for EOF (a grandchild holds a pipe): take what is
      // there, bounded, and end.
      for (Stream* s : polled) {
        for (int i = 0; i < 64; ++i) {
          pollfd p{s->fd.get(), POLLIN, 0};
          if (poll(&p, 1, 0) <= 0 || !read_once(*s)) break;
        }
        finish(*s);
      }
      break;
    }
    const int n = poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      MUSTER_LOG(ERROR) << "poll on worker output failed: " << ErrnoText(errno);
      for (Stream* s : polled) finish(*s);
      break;
    }
    if (fds[0].revents != 0) {
      uint64_t v;
      ssize_t ignored = read(shared->reader_wake_fd, &v, sizeof(v));
      (void)ignored;
    }
    // One read per ready pipe per round: a chatty worker cannot starve the
    // others.
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Stream& s = *polled[i - 1];
      if (!read_once(s)) finish(s);
    }
  }
  absl::MutexLock lock(&shared->mu);
  shared->reader_done = true;
}

// Records how worker `w` ended. Reads its error file outside the lock (files
// can be slow).
void RecordExit(Shared& shared, size_t index, int wait_status, bool lost) {
  WorkerExit exit;
  std::string error_file;
  {
    absl::MutexLock lock(&shared.mu);
    const WorkerState& w = shared.workers[index];
    exit.local_rank = w.spec.local_rank;
    exit.global_rank = w.spec.global_rank;
    exit.pid = w.pid;
    error_file = w.spec.error_file;
    exit.error_message = w.kill_reason;
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
  if (!exit.succeeded() && !error_file.empty() && exit.error_message.empty()) {
    ErrorFileContents contents = ReadErrorFileContents(error_file);
    exit.error_message = std::move(contents.message);
    exit.traceback = std::move(contents.traceback);
  }
  absl::MutexLock lock(&shared.mu);
  WorkerState& w = shared.workers[index];
  w.exit = std::move(exit);
  w.recorded = true;
  --shared.unrecorded;
  if (!w.exit.succeeded()) shared.any_failed = true;
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
      for (size_t i = 0; i < shared->workers.size(); ++i) {
        if (shared->workers[i].reaped) continue;
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
      for (size_t i = 0; i < shared->workers.size(); ++i) {
        WorkerState& w = shared->workers[i];
        if (w.reaped) continue;
        int st = 0;
        const pid_t r = waitpid(w.pid, &st, WNOHANG);
        if (r == w.pid || (r < 0 && errno == ECHILD)) {
          w.reaped = true;
          if (r < 0) {
            MUSTER_LOG(ERROR)
                << "worker pid " << w.pid
                << " was reaped by someone else (waitpid(-1) elsewhere in the "
                   "agent?); its exit status is unknown";
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
  }
  for (int fd : pidfds) {
    if (fd >= 0) close(fd);
  }
  absl::MutexLock lock(&shared->mu);
  shared->reaper_done = true;
}

}  // namespace

// -----------------------------------------------------------------------------

class WorkerGroup::Impl {
 public:
  Impl(std::shared_ptr<Shared> shared, std::vector<int> pids)
      : shared_(std::move(shared)), pids_(std::move(pids)) {}

  ~Impl() {
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
    for (WorkerState& w : shared_->workers) {
      w.reaped = true;
      w.recorded = true;
    }
    shared_->unrecorded = 0;
    shared_->reaper_done = true;
  }

  GroupStatus Poll() {
    absl::MutexLock lock(&shared_->mu);
    return StatusLocked();
  }

  GroupStatus Wait(absl::Duration timeout) {
    absl::MutexLock lock(&shared_->mu);
    Shared* s = shared_.get();
    auto not_running = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->any_failed || s->unrecorded == 0;
    };
    s->mu.AwaitWithTimeout(absl::Condition(&not_running), timeout);
    return StatusLocked();
  }

  GroupStatus Stop(int signal, absl::Duration grace) {
    absl::MutexLock stop_lock(&stop_mu_);
    if (stopped_) return Poll();
    Shared* s = shared_.get();
    auto all_recorded = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->unrecorded == 0;
    };

    SignalGroups(signal, /*include_reaped=*/true);
    bool done;
    {
      absl::MutexLock lock(&s->mu);
      done = s->mu.AwaitWithTimeout(absl::Condition(&all_recorded), grace);
    }
    if (!done) {
      MUSTER_LOG(WARNING) << "workers still running "
                          << absl::FormatDuration(grace) << " after signal "
                          << signal << "; sending SIGKILL";
    }
    // Also when every worker is gone: what they started in their groups must
    // not outlive them.
    SignalGroups(SIGKILL, /*include_reaped=*/true);
    {
      absl::MutexLock lock(&s->mu);
      done = s->mu.AwaitWithTimeout(absl::Condition(&all_recorded),
                                    kKillReapTimeout);
    }
    if (!done) {
      MUSTER_LOG(ERROR) << "workers did not die within "
                        << absl::FormatDuration(kKillReapTimeout)
                        << " of SIGKILL (uninterruptible sleep?); they will be "
                           "reaped when they "
                           "do";
    }
    FinishThreads();
    stopped_ = true;
    return Poll();
  }

  void Signal(int signal) { SignalGroups(signal, /*include_reaped=*/false); }

  bool Kill(int local_rank, const std::string& reason) {
    absl::MutexLock lock(&shared_->mu);
    for (WorkerState& w : shared_->workers) {
      if (w.spec.local_rank != local_rank || w.reaped) continue;
      w.kill_reason = reason;
      // SIGKILL works on a stopped (SIGSTOP) or wedged process too.
      if (kill(-w.pid, SIGKILL) != 0 && errno == ESRCH) kill(w.pid, SIGKILL);
      return true;
    }
    return false;
  }

  const std::vector<int>& pids() const { return pids_; }

 private:
  bool stopped() {
    absl::MutexLock lock(&stop_mu_);
    return stopped_;
  }

  // include_reaped: also the groups of workers already reaped, for what they
  // left behind.
  void SignalGroups(int signal, bool include_reaped) {
    absl::MutexLock lock(&shared_->mu);
    for (const WorkerState& w : shared_->workers) {
      if (w.reaped && !include_reaped) continue;
      if (kill(-w.pid, signal) != 0 && errno == ESRCH && !w.reaped) {
        kill(w.pid, signal);  // not (yet) a group leader
      }
    }
  }

  void FinishThreads() {
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

  GroupStatus StatusLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
    GroupStatus status;
    for (const WorkerState& w : shared_->workers) {
      if (!w.recorded) continue;
      status.exits.push_back(w.exit);
      status.exits.back().last_stderr_line = w.last_stderr_line;
    }
    std::stable_sort(status.exits.begin(), status.exits.end(),
                     [](const WorkerExit& a, const WorkerExit& b) {
                       if (a.succeeded() != b.succeeded())
                         return !a.succeeded();
                       return a.end_time < b.end_time;
                     });
    if (shared_->any_failed) {
      status.state = GroupState::kFailed;
    } else if (shared_->unrecorded == 0) {
      status.state = GroupState::kSucceeded;
    }
    return status;
  }

  const std::shared_ptr<Shared> shared_;
  const std::vector<int> pids_;
  std::thread reader_;
  std::thread reaper_;
  absl::Mutex stop_mu_;  // serializes Stop; held across it
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

// -----------------------------------------------------------------------------

absl::StatusOr<std::string> ResolveProgram(const std::string& argv0,
                                           const std::string& path_env) {
  if (argv0.empty())
    return absl::InvalidArgumentError("the program name is empty");
  int err = 0;
  bool is_dir = false;
  if (argv0.find('/') != std::string::npos) {
    if (IsExecutableFile(argv0, &err, &is_dir)) return argv0;
    if (is_dir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "'", argv0,
          "' is a directory, not a program; give the program's path"));
    }
    if (err == ENOENT || err == ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat(
          "program '", argv0,
          "' not found: no such file; check the path and the spelling"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("'", argv0, "' is not executable: ", ErrnoText(err), "; ",
                     NotExecutableHint(argv0)));
  }
  const std::string path =
      path_env.empty() ? std::string(kDefaultPath) : path_env;
  // As execvp: the first executable match wins; a match that cannot run is
  // remembered for the error, so "permission denied" is not reported as "not
  // found".
  std::string unusable;
  bool unusable_is_dir = false;
  int unusable_err = 0;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string candidate =
        dir.empty() ? argv0
                    : absl::StrCat(dir, dir.back() == '/' ? "" : "/", argv0);
    if (IsExecutableFile(candidate, &err, &is_dir)) return candidate;
    if (err != ENOENT && err != ENOTDIR && unusable.empty()) {
      unusable = candidate;
      unusable_is_dir = is_dir;
      unusable_err = err;
    }
  }
  if (!unusable.empty()) {
    if (unusable_is_dir) {
      return absl::FailedPreconditionError(
          absl::StrCat("program '", argv0, "' not found in PATH (", path,
                       "): only a directory '", unusable,
                       "'; give a path, or check the spelling"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "'", argv0, "' is not executable: '", unusable,
        "': ", ErrnoText(unusable_err), "; ", NotExecutableHint(unusable)));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("program '", argv0, "' not found in PATH (", path,
                   path_env.empty() ? ", the default: PATH is empty" : "",
                   "); give a path, or check the spelling"));
}

std::string ReadErrorFile(const std::string& path) {
  return ReadErrorFileContents(path).message;
}

ErrorFileContents ReadErrorFileContents(const std::string& path) {
  ErrorFileContents out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  auto it = j.find("message");
  if (it == j.end()) return out;
  if (it->is_string()) {
    out.message = it->get<std::string>();
    return out;
  }
  if (it->is_object()) {
    auto inner = it->find("message");
    if (inner != it->end() && inner->is_string())
      out.message = inner->get<std::string>();
    auto extra = it->find("extraInfo");
    if (extra != it->end() && extra->is_object()) {
      auto stack = extra->find("py_callstack");
      if (stack != extra->end() && stack->is_string()) {
        out.traceback = stack->get<std::string>();
        // The root cause travels to every agent: keep its tail (where the
        // error is) when a traceback is very long.
        constexpr size_t kMaxTraceback = 16 * 1024;
        if (out.traceback.size() > kMaxTraceback) {
          out.traceback = absl::StrCat(
              "...\n",
              out.traceback.substr(out.traceback.size() - kMaxTraceback));
        }
      }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(
    std::vector<WorkerSpec> workers, OutputOptions output) {
  if (workers.empty()) return absl::InvalidArgumentError("no workers to start");
  bool any_files = false;
  for (const auto* m : {&output.redirects, &output.tees}) {
    for (const auto& [rank, streams] : *m) {
      if (streams < kStdNone || streams > kStdAll) {
        return absl::InvalidArgumentError(
            absl::StrCat("redirect/tee value ", streams, " for local rank ",
                         rank, " is not 0, 1, 2 or 3"));
      }
      any_files = any_files || streams != kStdNone;
    }
  }
  if (any_files && output.attempt_dir.empty()) {
    return absl::InvalidArgumentError(
        "redirects or tee need a log directory (attempt_dir is empty); give "
        "--log-dir");
  }
  std::vector<std::string> programs;
  for (const WorkerSpec& w : workers) {
    if (w.argv.empty() || w.argv[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker local_rank ", w.local_rank,
                       " has no program to run (empty argv)"));
    }
    auto program = ResolveProgram(w.argv[0], EnvOr(w.env, "PATH"));
    if (!program.ok()) return program.status();
    programs.push_back(*std::move(program));
  }

  // Log files and console routing, before anything runs.
  auto shared = std::make_shared<Shared>();
  std::shared_ptr<UniqueFd> filtered[2];
  // Shared with the reader thread, which outlives `output`.
  const std::shared_ptr<const std::vector<std::string>> filters[2] = {
      std::make_shared<const std::vector<std::string>>(
          output.duplicate_stdout_filters),
      std::make_shared<const std::vector<std::string>>(
          output.duplicate_stderr_filters)};
  for (int k = 0; k < 2; ++k) {
    if (filters[k]->empty() || output.attempt_dir.empty()) continue;
    auto file =
        OpenLogFile(std::filesystem::path(output.attempt_dir) /
                    (k == 0 ? "filtered_stdout.log" : "filtered_stderr.log"));
    if (!file.ok()) return file.status();
    filtered[k] = std::make_shared<UniqueFd>(std::move(*file));
  }
  std::vector<Stream> streams;
  for (size_t index = 0; index < workers.size(); ++index) {
    const WorkerSpec& w = workers[index];
    const int redirected = StreamsFor(output.redirects, w.local_rank);
    const int teed = StreamsFor(output.tees, w.local_rank);
    const bool console_ok = output.console_local_ranks.empty() ||
                            output.console_local_ranks.count(w.local_rank) > 0;
    for (int which : {kStdOut, kStdErr}) {
      Stream s;
      s.local_rank = w.local_rank;
      s.worker_index = index;
      s.is_stderr = which == kStdErr;
      s.shared = shared.get();
      // As torchrun: the filtered files copy teed streams only.
      const int k = which == kStdOut ? 0 : 1;
      if (filtered[k] != nullptr && (teed & which)) {
        s.filtered = filtered[k];
        s.filters = filters[k];
      }
      if (output.prefix_lines)
        s.prefix = absl::StrCat("[rank", w.global_rank, "]:");
      // tee wins over redirect for the console (as torchrun: tee = redirect +
      // tail).
      const bool to_console =
          console_ok && (!(redirected & which) || (teed & which));
      s.console_fd = to_console ? (which == kStdOut ? output.console_stdout_fd
                                                    : output.console_stderr_fd)
                                : -1;
      if ((redirected | teed) & which) {
        auto file =
            OpenLogFile(std::filesystem::path(output.attempt_dir) /
                        std::to_string(w.local_rank) /
                        (which == kStdOut ? "stdout.log" : "stderr.log"));
        if (!file.ok()) return file.status();
        s.file = *std::move(file);
      }
      streams.push_back(std::move(s));
    }
    // A stale error file (an earlier attempt's) must not be taken for this
    // attempt's.
    if (!w.error_file.empty()) unlink(w.error_file.c_str());
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
  for (size_t i = 0; i < workers.size(); ++i) {
    auto spawned = SpawnWorker(workers[i], programs[i]);
    if (!spawned.ok()) {
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
    MUSTER_LOG(DEBUG) << "started worker local_rank=" << workers[i].local_rank
                      << " rank=" << workers[i].global_rank
                      << " pid=" << spawned->pid;
  }

  {
    absl::MutexLock lock(&shared->mu);
    for (size_t i = 0; i < workers.size(); ++i) {
      WorkerState w;
      w.spec = std::move(workers[i]);
      w.pid = pids[i];
      shared->workers.push_back(std::move(w));
    }
    shared->unrecorded = static_cast<int>(pids.size());
  }
  auto impl = std::make_unique<Impl>(shared, pids);
  if (!impl->StartThreads(std::move(streams), std::move(pidfds))) {
    // Without its threads the group cannot be watched: take it down here (the
    // reaper is not running, so nobody else reaps) and let the Impl's Stop find
    // everything ended.
    for (int pid : pids) KillAndReap(pid, kKillReapTimeout);
    impl->MarkAllReaped();
    return absl::InternalError(
        "cannot start the worker group's threads; see the log");
  }
  return std::unique_ptr<WorkerGroup>(new WorkerGroup(std::move(impl)));
}

WorkerGroup::WorkerGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerGroup::~WorkerGroup() = default;
GroupStatus WorkerGroup::Poll() { return impl_->Poll(); }
GroupStatus WorkerGroup::Wait(absl::Duration timeout) {
  return impl_->Wait(timeout);
}
GroupStatus WorkerGroup::Stop(int signal, absl::Duration grace) {
  return impl_->Stop(signal, grace);
}
bool WorkerGroup::Kill(int local_rank, const std::string& reason) {
  return impl_->Kill(local_rank, reason);
}

void WorkerGroup::Signal(int signal) { impl_->Signal(signal); }
std::vector<int> WorkerGroup::pids() const { return impl_->pids(); }

}  // namespace muster::agent
