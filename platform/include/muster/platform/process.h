// The process seam: start a group of processes with argv, environment, working
// directory and piped output; watch them; stop them as a unit (a signal, a
// grace period, then kill the whole tree); and read how each ended as data (an
// exit code or a signal). ProcessLauncher::Default() is the operating system's
// (platform/posix/: fork/exec into a process group each; platform/windows/: a
// job object each); FakeProcessLauncher (platform/fake/) runs nothing.
//
// Output: each process's stdout and stderr are read through pipes on one
// reader thread and cut into whole lines (never torn, never interleaved
// mid-line). Each line goes, as its StreamRoute says, to the console with the
// process's line prefix, to a log file byte for byte, and to a shared
// "filtered" file when it matches a filter.
#ifndef MUSTER_PLATFORM_PROCESS_H_
#define MUSTER_PLATFORM_PROCESS_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace muster::platform {

// Where one output stream of a process goes.
struct StreamRoute {
  // Each line to the console stream (LaunchOptions::console_stdout /
  // console_stderr), prefixed with ProcessSpec::line_prefix when `prefixed`.
  bool console = true;
  // Whether console and filtered lines of this stream carry the process's
  // line prefix (torchrun prefixes teed streams only).
  bool prefixed = true;
  // The process's bytes exactly (no prefix, no '\n' added to a partial last
  // line) to this file, created or truncated, its directories made. Empty:
  // none.
  std::string file;
  // A line that contains any of the stream's LaunchOptions filters also goes,
  // prefixed, to the shared filtered file of that stream.
  bool filtered = false;
};

struct ProcessSpec {
  // argv[0] is a path or a name looked up in PATH of `env` (FindExecutable).
  std::vector<std::string> argv;
  // The complete environment of the process.
  std::map<std::string, std::string> env;
  // The working directory; empty: the launcher's.
  std::string cwd;
  // CPUs the process may run on, set before it runs; empty: the launcher's.
  std::vector<int> cpu_affinity;
  // What error messages call it ("worker local_rank 3"); empty: "process
  // <index>".
  std::string name;
  // Console lines of this process start with it ("[rank3]:"); may be empty.
  std::string line_prefix;
  StreamRoute stdout_route;
  StreamRoute stderr_route;
};

struct LaunchOptions {
  // Console descriptors (tests point them at pipes). On Windows these name
  // the standard handles (1, 2) only.
  int console_stdout = 1;
  int console_stderr = 2;
  // The shared files of StreamRoute::filtered, created or truncated when their
  // filters are not empty, and the filters.
  std::string filtered_stdout_file;
  std::string filtered_stderr_file;
  std::vector<std::string> stdout_filters;
  std::vector<std::string> stderr_filters;
  // Called after process ends are recorded (Poll sees them), those that Stop
  // and Kill cause included, on a thread of the group's, with no lock held:
  // lets a caller wait on its own wake-up (the agent's main loop) instead of
  // polling. Must not block. Empty: none.
  std::function<void()> on_exit;
};

// How one process ended.
struct ProcessExit {
  // The process's index in the specs given to Start.
  size_t index = 0;
  int pid = 0;
  int exit_code = 0;  // -1 when killed by a signal (or lost)
  int signal = 0;     // the signal that killed it, or 0
  absl::Time end_time;
  // Why ProcessGroup::Kill killed it (empty otherwise).
  std::string kill_reason;
  // The last non-empty line it wrote to stderr (at most 1 KiB; complete once
  // the group is stopped).
  std::string last_stderr_line;
  bool succeeded() const { return exit_code == 0 && signal == 0; }
};

enum class GroupState {
  kRunning,    // every process alive, or some exited 0 and others still run
  kSucceeded,  // every process exited 0
  kFailed,     // at least one failed (the others may run until Stop)
};

struct GroupStatus {
  GroupState state = GroupState::kRunning;
  // Every process that has ended so far, failures first, then by end time.
  std::vector<ProcessExit> exits;
};

// The processes of one Start, watched and stopped as a unit. Thread-safe. On
// Linux it must be created and stopped from a long-lived thread: the
// parent-death signal comes when the *thread* that forked a child exits.
class ProcessGroup {
 public:
  // Stops (terminate, 5 s grace, kill) and reaps what still runs.
  virtual ~ProcessGroup() = default;

  // Non-blocking.
  virtual GroupStatus Poll() = 0;

  // Blocks up to `timeout` until the group is no longer kRunning.
  virtual GroupStatus Wait(absl::Duration timeout) = 0;

  // Sends `signal` to each process's tree (also of processes that already
  // ended: what they started must not outlive them), waits up to `grace`,
  // then kills every tree; reaps all and drains their output. Idempotent.
  // Processes ended by this call count as failed (exit_code -1, signal set).
  // Blocks at most about grace + 13 s (10 s for killed processes to go, 3 s
  // for the pipes to reach EOF; output pending then is dropped).
  virtual GroupStatus Stop(int signal, absl::Duration grace) = 0;

  // Sends `signal` to every live process's tree without waiting.
  virtual void Signal(int signal) = 0;

  // Kills one live process's tree and records `reason` as its kill_reason.
  // False when it has already ended. Non-blocking.
  virtual bool Kill(size_t index, const std::string& reason) = 0;

  // The processes' ids, in spec order (each the leader of its tree).
  virtual std::vector<int> pids() const = 0;
};

// Thread-safe.
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;

  // Checks every spec and starts every process before it returns; stdin is
  // the null device. Errors: INVALID_ARGUMENT for no specs or an empty argv;
  // FAILED_PRECONDITION naming the program when it is not found or cannot be
  // executed (and why), or a log file cannot be opened; INTERNAL when the OS
  // refuses (pipes, fork). Nothing is left running when Start fails.
  virtual absl::StatusOr<std::unique_ptr<ProcessGroup>> Start(
      std::vector<ProcessSpec> specs, LaunchOptions options) = 0;

  // The operating system's launcher. Never null, never destroyed.
  static ProcessLauncher* Default();
};

// A short-lived helper program (an interpreter asked for its path, a
// firewall tool): run to its end with a deadline, its stdout captured.
struct CommandSpec {
  // argv[0] is looked up in the launcher's own PATH.
  std::vector<std::string> argv;
  // The complete environment of the command.
  std::map<std::string, std::string> env;
  // Killed when it has not ended by then.
  absl::Duration timeout = absl::Seconds(10);
  // stdout beyond this is read and dropped.
  size_t max_output = 64 * 1024;
};

struct CommandResult {
  bool timed_out = false;  // killed at the timeout
  int exit_code = -1;      // -1 when it did not exit by itself
  int signal = 0;
  std::string output;  // its stdout (stderr goes to the null device)
};

// Runs `spec` with stdin and stderr on the null device and a clean signal
// mask. Blocks up to spec.timeout (plus the kill). Errors:
// FAILED_PRECONDITION "cannot run <argv[0]>: <why>" when it cannot start.
absl::StatusOr<CommandResult> RunCommand(const CommandSpec& spec);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_PROCESS_H_
