// JobKeeper: makes every process of a job die with its launcher, even when the
// launcher is killed with SIGKILL.
//
// A worker dies with the launcher by its parent-death signal, but what the
// worker started (data loader processes, a shell's children, a daemon) is
// re-parented to init and keeps running. The launcher cannot clean up after a
// SIGKILL, so a small keeper process does it:
//
// clang-format off
//   muster (launcher) ──pipe──► muster-keeper (own process group, ignores
//     │  "+pgid" / "-pgid"          INT/TERM/HUP/QUIT; holds the read end)
//     ├─ worker pgid 101 ─ grandchild (same group)
//     └─ worker pgid 102 ─ setsid'd daemon (MUSTER_JOB_TAG in its env)
// clang-format on
//
// The launcher tells the keeper each worker process group it starts and
// stops. When the pipe reaches EOF (the launcher exited, however it died),
// the keeper SIGKILLs every group still registered, then every process whose
// environment carries this job's MUSTER_JOB_TAG (descendants that left their
// group with setsid/setpgid but kept the environment), repeating the scan
// until it finds none, and exits. Linux only; elsewhere Start reports
// UNIMPLEMENTED and the launcher runs without a keeper.
//
// Not covered: a descendant that both leaves its process group and clears its
// environment (a cgroup would catch it; muster does not require one).
#ifndef MUSTER_PLATFORM_JOB_KEEPER_H_
#define MUSTER_PLATFORM_JOB_KEEPER_H_

#include <string>

#include "absl/status/status.h"

namespace muster::platform {

// The environment variable that marks a job's processes for the keeper.
inline constexpr char kJobTagVariable[] = "MUSTER_JOB_TAG";

// Starts the keeper. Call once, from the main thread, before any other thread
// exists (it forks without exec). Errors: INTERNAL when pipe or fork fails
// (the launcher may run on without one). Blocks for the fork only.
absl::Status StartJobKeeper();

// The tag the workers carry in MUSTER_JOB_TAG; empty when no keeper runs.
// Thread-safe after StartJobKeeper returned.
const std::string& JobKeeperTag();

// Registers / forgets a worker's process group (its leader's pid). Never
// blocks for long (a small write to a pipe); no-op without a keeper.
// Thread-safe.
void KeeperWatchGroup(int pgid);
void KeeperForgetGroup(int pgid);

// Hands the removal of the directory tree `path` to the keeper, which removes
// it once the launcher has exited (after its kills), so that the launcher does
// not wait on the file system at exit (with `discard` on the mount, removing a
// launch's 7 log directories took 5-25 ms, more than the rest of a launch).
// False when no keeper runs or the path does not fit one atomic pipe write:
// the caller then removes it itself. Thread-safe.
bool KeeperRemoveTreeAtExit(const std::string& path);

// The keeper's loop, for StartJobKeeper's child and for tests: reads
// "+PGID\n" / "-PGID\n" / "RPATH\n" lines from `read_fd` until EOF, then kills
// as described above and removes the trees named by R lines. Returns how many
// process groups and processes it signalled (a process may be counted in both).
int RunJobKeeper(int read_fd, const std::string& tag);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_JOB_KEEPER_H_
