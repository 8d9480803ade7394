// Subprocess: a child process for end-to-end tests, with its output captured to
// a file (no pipe to fill up), a deadline on every wait, and a kill of its
// whole process group when the test object goes away, so a failing test never
// leaves processes behind.
#ifndef MUSTER_TESTS_TESTING_SUBPROCESS_H_
#define MUSTER_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/wait.h"  // WaitUntil, used with the helpers below

namespace muster::testing {

// Where the project's binaries are: $MUSTER_BIN_DIR (set by ctest), else the
// test's own folder.
std::string BinDir();
std::string BinPath(const std::string& name);
// The argv of the muster launcher (BinPath("muster")) with `flags`.
std::vector<std::string> MusterArgv(const std::vector<std::string>& flags);
// The --rdzv-conf of the e2e tests: a short last call keeps rounds quick; a
// node is lost after `max_attempts` missed heartbeats of 0.25 s (12: 3 s, long
// enough that a loaded machine loses no agent by accident, short enough to
// catch a hung one).
std::string FastRdzvConf(double last_call_s = 1, int max_attempts = 12);
// The source tree ($MUSTER_SOURCE_DIR).
std::string SourceDir();
// A fresh temporary directory, removed by nobody (under /tmp; tests may inspect
// it after).
std::string MakeTempDir(const std::string& tag);
// A free TCP port on 127.0.0.1, below the kernel's ephemeral range: a server
// that a test kills and starts again on it cannot find the port taken by some
// process's outgoing connection (or by a client's connect to itself) while it
// was down, which a port from the ephemeral range allows.
int FreePort();
// Environment overrides (each set to "", i.e. removed) for a process that
// must not inherit a launcher's or a user's job variables when ctest itself
// runs under muster or torchrun: rank, size, master, store and interface.
std::map<std::string, std::string> EnvWithoutLauncher();

class Subprocess {
 public:
  // Starts argv with the current environment plus `env` (which overrides). The
  // child runs in its own process group. Output (stdout and stderr together)
  // goes to a temporary file.
  Subprocess(std::vector<std::string> argv,
             std::map<std::string, std::string> env = {});
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits up to timeout. Returns the exit code (128+signal when killed by a
  // signal), or nullopt when it is still running.
  std::optional<int> Wait(absl::Duration timeout);
  // Waits; on timeout SIGKILLs the group and returns -1 (and records that it
  // timed out).
  int WaitOrKill(absl::Duration timeout);
  // Sends sig to the process (not its group).
  void Signal(int sig);
  // Sends SIGKILL to the process group and reaps it.
  void Kill();
  // Whether it has not been seen to exit yet (reaps it if it has exited).
  bool Running();

  // Everything the child printed so far.
  std::string Output() const;
  // Waits up to timeout until Output() contains text.
  bool WaitForOutput(const std::string& text, absl::Duration timeout) const;

 private:
  pid_t pid_ = -1;
  std::string output_path_;
  std::optional<int> exit_code_;
};

// Waits up to timeout for proc to write a port to the --port-file at path
// (musterd, muster with --port-file); returns it, or 0 when proc exited first
// or the time ran out.
int AwaitPortFile(const std::string& path, Subprocess& proc,
                  absl::Duration timeout);

// Lines of text that contain `needle`.
std::vector<std::string> LinesWith(const std::string& text,
                                   const std::string& needle);

// Whether a process with this pid exists (and is not a zombie).
bool ProcessAlive(pid_t pid);

// The pids in the DIR/<RANK>.pid files test_worker --pid-dir writes (not the
// .tmp files of a write in progress).
std::vector<pid_t> PidsInDir(const std::string& dir);

// Waits until none of pids is alive; false if one still is after timeout.
bool AllExited(const std::vector<pid_t>& pids, absl::Duration timeout);

// Slows `pid` from outside, as a throttled CPU would: SIGSTOP for `stopped`,
// then SIGCONT for `running`, over and over while it lives (stopped = running:
// about half speed). The destructor ends with SIGCONT.
class DutyCycle {
 public:
  DutyCycle(pid_t pid, absl::Duration stopped, absl::Duration running);
  ~DutyCycle();
  DutyCycle(const DutyCycle&) = delete;
  DutyCycle& operator=(const DutyCycle&) = delete;

 private:
  const pid_t pid_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_SUBPROCESS_H_
