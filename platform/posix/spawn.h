// POSIX spawning for the process launcher: fork, then in the child its own
// process group, the parent-death signal, CPU affinity, a clean signal state,
// the pipes as stdio and execve; a CLOEXEC report pipe says why exec failed.
// Private to platform/posix.
#ifndef MUSTER_PLATFORM_POSIX_SPAWN_H_
#define MUSTER_PLATFORM_POSIX_SPAWN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/platform/process.h"
#include "platform/posix/fd.h"

namespace muster::platform::posix {

// After SIGKILL, how long a stop waits for the kernel to let the processes go
// (a process in uninterruptible sleep, e.g. on a dead NFS mount or in a GPU
// driver, may take longer).
inline constexpr absl::Duration kKillReapTimeout = absl::Seconds(10);

struct Spawned {
  int pid = -1;
  UniqueFd stdout_r;
  UniqueFd stderr_r;
};

// Starts `spec` running `program` (already resolved) with `name` in its error
// messages, and waits until it has exec'd. Errors: FAILED_PRECONDITION when
// execve fails (the message says why and how to fix it); INTERNAL for pipes,
// fork and the child's set-up.
absl::StatusOr<Spawned> SpawnProcess(const ProcessSpec& spec,
                                     const std::string& program,
                                     const std::string& name);

// Kills the process group of `pid` and reaps `pid`, waiting at most `timeout`.
void KillAndReap(int pid, absl::Duration timeout);

// The fix for a program that exists but cannot be executed: chmod, or its
// interpreter (python for a .py script). Shared by Start's exec report and
// FindExecutable's PATH lookup.
std::string NotExecutableHint(const std::string& argv0);

}  // namespace muster::platform::posix

#endif  // MUSTER_PLATFORM_POSIX_SPAWN_H_
