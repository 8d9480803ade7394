// Starting one process on Windows for the launcher and RunCommand: the
// program resolved (PATHEXT; a .py script through python.exe), CreateProcessW
// suspended with a quoted command line, a UTF-16 environment block, the
// working directory and pipes for stdout/stderr, put in its own job object
// (JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE: its whole tree dies with the job, and
// the job dies with the launcher however it ends), then resumed. Private to
// platform/windows.
#ifndef MUSTER_PLATFORM_WINDOWS_SPAWN_WINDOWS_H_
#define MUSTER_PLATFORM_WINDOWS_SPAWN_WINDOWS_H_

#include <windows.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/platform/process.h"
#include "platform/windows/win_util.h"

namespace muster::platform::windows {

// The exit code TerminateJobObject gives the processes muster kills (128 +
// SIGKILL, as a shell would report a killed process on Linux).
inline constexpr UINT kKilledExitCode = 137;

// Checks that `path` (found for `argv0`) is something CreateProcessW can run
// or muster runs through an interpreter: a PE image ("MZ"), or a .py script.
// Returns `path`. Errors: FAILED_PRECONDITION with the fix for a batch file, a
// "#!" script, anything else.
absl::StatusOr<std::string> CheckRunnable(const std::string& argv0,
                                          const std::string& path);

// `name` in `env`, ignoring case as Windows does; falls back to this
// process's environment when `env` lacks it.
std::string EnvValue(const std::map<std::string, std::string>& env,
                     const std::string& name);

// What to run for `argv`: the program's path and the command line's argv
// (argv[0] as given; for a .py script, python.exe from PATH first, then the
// script's path). Errors as FindExecutable, and FAILED_PRECONDITION when a
// .py script has no python.exe in PATH.
struct Resolved {
  std::string program;
  std::vector<std::string> argv;
};
absl::StatusOr<Resolved> ResolveCommand(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env);

struct SpawnRequest {
  Resolved command;
  std::map<std::string, std::string> env;
  std::string cwd;
  std::vector<int> cpu_affinity;
  std::string name;         // for error messages
  bool pipe_stderr = true;  // false: stderr to the null device...
  // ...or, when this is set, into the stdout pipe (a shell's 2>&1).
  bool stderr_to_stdout = false;
};

struct Spawned {
  UniqueHandle process;
  UniqueHandle job;
  int pid = 0;
  UniqueHandle stdout_r;
  UniqueHandle stderr_r;  // invalid when !pipe_stderr
};

// Starts the process (stdin on the null device) in a new console process
// group and its own job object. Errors: FAILED_PRECONDITION when Windows
// refuses the program or the working directory (with the fix); INTERNAL for
// pipes, the job object.
absl::StatusOr<Spawned> SpawnInJob(const SpawnRequest& request);

// How a process started by SpawnInJob ended under WaitWithOutput.
struct Finished {
  std::string output;      // its stdout, at most max_output bytes
  bool timed_out = false;  // its job was terminated at the timeout
  DWORD exit_code = 0;     // kKilledExitCode when timed out
};

// Reads `spawned`'s stdout on a thread (past `max_output` bytes it is read
// and dropped) until the process exits or `timeout` passes, then terminates
// its job (at the timeout, and also after an exit: what it started must not
// outlive it holding the pipe open). Blocks at most `timeout` + 10 s.
// RunCommand's and the ToolRunner's core (command_windows.cc).
Finished WaitWithOutput(Spawned& spawned, absl::Duration timeout,
                        size_t max_output);

}  // namespace muster::platform::windows

#endif  // MUSTER_PLATFORM_WINDOWS_SPAWN_WINDOWS_H_
