// WorkerGroup: the worker processes of one round on this node, started, watched
// and stopped as a unit, on a platform::ProcessLauncher (the OS's, or a fake in
// tests). Each worker runs in its own process tree (a process group with
// PR_SET_PDEATHSIG on Linux), and has its stdout/stderr read through pipes:
// every whole line goes to the console (never torn, never interleaved
// mid-line) and/or to <attempt_dir>/<local_rank>/{stdout,stderr}.log, as the
// output options say. As under torchrun, console lines are the worker's own
// unless teed (-t), which prefixes them "[<role><local rank>]:" or with
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; muster's --prefix-output prefixes
// every console line.
// What is the agent's here: torchrun's -r/-t routing, ranks, and the workers'
// error files (TORCHELASTIC_ERROR_FILE), read when a worker fails.
#ifndef MUSTER_AGENT_WORKER_GROUP_H_
#define MUSTER_AGENT_WORKER_GROUP_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"

namespace muster::agent {

// torchrun's Std flags for -r/--redirects and -t/--tee: which streams go to
// files.
enum StdStreams : int { kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3 };

struct WorkerSpec {
  int local_rank = 0;
  int global_rank = 0;
  // argv[0] is a path or a name looked up in PATH (of `env`).
  std::vector<std::string> argv;
  // The worker's complete environment (the agent's own plus the contract of
  // docs/migrating-from-torchrun.md, "The worker environment").
  std::map<std::string, std::string> env;
  // Where the worker writes its JSON error file (TORCHELASTIC_ERROR_FILE); read
  // after it fails.
  std::string error_file;
  // CPUs the worker may run on (--numa-binding), set before exec; empty: the
  // agent's own affinity.
  std::vector<int> cpu_affinity;
};

struct OutputOptions {
  // Per local rank: streams written only to the log files (not the console).
  // Key -1 = every rank.
  std::map<int, int> redirects;
  // Per local rank: streams written to the log files and the console. Key -1 =
  // every rank. A stream both redirected and teed is teed (as torchrun: tee =
  // redirect + console). Log files hold the worker's bytes exactly: no prefix,
  // no '\n' added to a partial last line (the console gets one).
  std::map<int, int> tees;
  // When not empty, only these local ranks' lines reach the console (files get
  // everything).
  std::set<int> console_local_ranks;
  // <log_dir>/<run_id>/attempt_<n>: log files go under
  // <attempt_dir>/<local_rank>/. Required when any redirect or tee is set.
  std::string attempt_dir;
  // The console prefix of a worker's lines, as torchrun's
  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (ExpandLinePrefix); empty: torchrun's
  // tee header "[<role><local rank>]:" (kDefaultLinePrefix).
  std::string line_prefix_template;
  // What the template's ${role_name} and ${hostname} are.
  std::string role = "default";
  std::string hostname;
  // Which console lines carry the prefix: false, teed lines only (torchrun:
  // the lines of a stream that is not teed reach the console as the worker
  // wrote them); true, every console line (muster's --prefix-output).
  bool prefix_all_lines = false;
  // torchrun's --duplicate-stdout-filters / --duplicate-stderr-filters: a
  // teed line (of a rank console_local_ranks lets through) that contains any
  // of these strings is also written, with its prefix, to
  // <attempt_dir>/filtered_stdout.log / filtered_stderr.log (one file for all
  // local ranks).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  // Console file descriptors (tests may point them at pipes).
  int console_stdout_fd = 1;
  int console_stderr_fd = 2;
};

// How one worker ended: the process's end (platform::ProcessExit, whose index
// is the worker's in the specs given to Start, and whose kill_reason is
// reported as error_message) and the agent's view of it.
struct WorkerExit : platform::ProcessExit {
  int local_rank = 0;
  int global_rank = 0;
  // Why the agent killed it (the watchdog), else the message of the worker's
  // error file ("message"), when it wrote one.
  std::string error_message;
  // The Python traceback from the error file (extraInfo.py_callstack), when
  // there is one.
  std::string traceback;
};

// The same states as a process group's: kRunning, kSucceeded, kFailed.
using GroupState = platform::GroupState;

struct GroupStatus {
  GroupState state = GroupState::kRunning;
  // Every worker that has ended so far, failures first by end time.
  std::vector<WorkerExit> exits;
};

// As ReadErrorFile, and the traceback PyTorch's @record stores in
// message.extraInfo.py_callstack (empty when absent).
struct ErrorFileContents {
  std::string message;
  std::string traceback;
};

// Thread-safe. Must be created and stopped from a long-lived thread: Linux
// delivers the parent-death signal when the *thread* that forked a child
// exits.
class WorkerGroup {
 public:
  // Checks and starts every worker before it returns. Workers get /dev/null as
  // stdin (a worker in a background process group reading the terminal would
  // be stopped), and a stale file at WorkerSpec::error_file is removed first so
  // that an earlier attempt's is never reported. Errors:
  // FAILED_PRECONDITION naming the program when argv[0] is not found in PATH or
  // cannot be executed (and why); INTERNAL for a failed fork/pipe;
  // INVALID_ARGUMENT for empty argv or missing attempt_dir with redirects. No
  // worker is left running when Start fails. `launcher` (not owned) outlives
  // the group. `on_exit` (may be empty) is called, on a thread of the
  // group's and without blocking, after workers' ends are recorded
  // (platform::LaunchOptions::on_exit): the agent's loop waits on it.
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(
      platform::ProcessLauncher* launcher, std::vector<WorkerSpec> workers,
      OutputOptions output, std::function<void()> on_exit = {});
  // As above, on the OS's launcher (platform::ProcessLauncher::Default()).
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(
      std::vector<WorkerSpec> workers, OutputOptions output);

  // Stops (SIGTERM, 5 s grace, SIGKILL) and reaps any worker still running.
  ~WorkerGroup();

  // Non-blocking.
  GroupStatus Poll();

  // Blocks up to timeout until the group is no longer kRunning (or a worker
  // failed).
  GroupStatus Wait(absl::Duration timeout);

  // Sends `signal` to each worker's process group, waits up to `grace` for them
  // to exit, then SIGKILLs the rest; reaps all, flushes their output.
  // Idempotent. Returns the final status. Workers ended by this call count as
  // failed (exit_code -1, signal set): a caller that stops a running group on
  // purpose should not take kFailed for the group's own failure. The groups of
  // workers that already exited are signalled too (what they started must not
  // outlive them). Blocks at most about grace + 13 s: up to 10 s for SIGKILLed
  // processes to go (uninterruptible sleep), up to 3 s for the output pipes to
  // reach EOF (a daemon that left the group may hold them); output still
  // pending then is dropped and the reader thread is let go.
  GroupStatus Stop(int signal, absl::Duration grace);

  // Sends signal to every live worker's process group without waiting
  // (forwarding SIGINT etc.).
  void Signal(int signal);

  // SIGKILLs one live worker's process group and reports `reason` as its error
  // message (the watchdog's "hung" verdict). Returns false when that worker has
  // already ended. Non-blocking.
  bool Kill(int local_rank, const std::string& reason);

  std::vector<int> pids() const;

 private:
  WorkerGroup(std::unique_ptr<platform::ProcessGroup> group,
              std::vector<WorkerSpec> workers);
  // The agent's view of one process's end: ranks, and its error file when it
  // failed (read once, then kept).
  GroupStatus Convert(platform::GroupStatus status);

  const std::unique_ptr<platform::ProcessGroup> group_;
  const std::vector<WorkerSpec> workers_;
  absl::Mutex mu_;
  // Error files read so far, by worker index.
  std::map<size_t, ErrorFileContents> error_files_ ABSL_GUARDED_BY(mu_);
};

// Looks argv0 up as execvp would, with PATH from `path_env`: the platform's
// FindExecutable (muster/platform/env.h), which says what it returns.
inline absl::StatusOr<std::string> ResolveProgram(const std::string& argv0,
                                                  const std::string& path_env) {
  return platform::FindExecutable(argv0, path_env);
}

// torchrun's console prefix of teed lines when no template is set.
inline constexpr char kDefaultLinePrefix[] = "[${role_name}${local_rank}]:";

// Expands a log line prefix template as torchrun does (Python's
// string.Template.safe_substitute): $NAME or ${NAME} for role_name, rank (the
// global rank), local_rank and hostname; $$ is one $; any other $ stays as
// written. Pure.
std::string ExpandLinePrefix(const std::string& line_template,
                             const std::string& role_name, int rank,
                             int local_rank, const std::string& hostname);

// Reads a torchelastic JSON error file: {"message": "..."} or
// {"message": {"message": "...", "extraInfo": {...}}}. Empty when absent or
// unreadable.
std::string ReadErrorFile(const std::string& path);

// As ReadErrorFile, with the traceback (see ErrorFileContents).
ErrorFileContents ReadErrorFileContents(const std::string& path);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_WORKER_GROUP_H_
