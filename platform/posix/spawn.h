// POSIX spawning for the process launcher: a vfork-style clone (the child
// shares our memory until it execs; no page tables copied), then in the child
// its own process group, the parent-death signal, CPU affinity, a clean signal
// state, the pipes as stdio and execve; the child leaves why it could not exec
// in memory we read once it has gone. Private to platform/posix.
#ifndef MUSTER_PLATFORM_POSIX_SPAWN_H_
#define MUSTER_PLATFORM_POSIX_SPAWN_H_

#include <memory>
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

// A process started by StartSpawn whose execve is not yet confirmed. Freeing
// it unconfirmed kills and reaps the process.
struct PendingSpawn;
struct PendingDeleter {
  void operator()(PendingSpawn* p) const;
};
using Pending = std::unique_ptr<PendingSpawn, PendingDeleter>;

// Starts `spec` running `program` (already resolved) with `name` in its error
// messages, without waiting for its execve: start every process, then
// FinishSpawn each. Errors: INTERNAL for pipes and clone.
absl::StatusOr<Pending> StartSpawn(const ProcessSpec& spec,
                                   const std::string& program,
                                   const std::string& name);

// Waits (up to 30 s) until the process of `p` has exec'd. Errors:
// FAILED_PRECONDITION when execve failed (the message says why and how to fix
// it); INTERNAL for the child's set-up. On error the process is reaped.
// `spec` given to StartSpawn must still be alive.
absl::StatusOr<Spawned> FinishSpawn(Pending p);

// The pid of a pending process.
int PendingPid(const PendingSpawn& p);

// Kills the process group of `pid` and reaps `pid`, waiting at most `timeout`.
void KillAndReap(int pid, absl::Duration timeout);

// The fix for a program that exists but cannot be executed: chmod, or its
// interpreter (python for a .py script). Shared by Start's exec report and
// FindExecutable's PATH lookup.
std::string NotExecutableHint(const std::string& argv0);

}  // namespace muster::platform::posix

#endif  // MUSTER_PLATFORM_POSIX_SPAWN_H_
