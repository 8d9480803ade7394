// StackCapturer: reads the stacks of this agent's running workers, for
// `muster stacks` (the session's CaptureStacks) and the hang report (the
// watchdog, before it kills). Native workers: platform::ReadNativeStacks
// (libdwfl on Linux, DbgHelp on Windows; each thread stopped for a moment).
// Python workers started through
// the launcher's bootstrap (cli/launch_resolve.cc, kStacksPrelude): the
// bootstrap registered faulthandler for platform::StacksSignal() on the
// worker's MUSTER_STACKS_FILE (Linux), or started a thread that dumps there
// when the event platform::StacksEventPrefix() + pid is set (Windows, which
// has no such signal); the agent sends the signal or sets the event
// (platform::SignalForStacks) and parses the dump (the Python function names
// of every thread). A Python worker whose bootstrap has not registered yet
// (just started) gets its native stacks instead, never the signal (whose
// default action would end it).
#ifndef MUSTER_AGENT_SRC_STACK_CAPTURE_H_
#define MUSTER_AGENT_SRC_STACK_CAPTURE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::agent {

// The environment variables the Python bootstrap reads.
inline constexpr char kStacksFileVariable[] = "MUSTER_STACKS_FILE";
inline constexpr char kStacksSignalVariable[] = "MUSTER_STACKS_SIGNAL";
inline constexpr char kStacksEventVariable[] = "MUSTER_STACKS_EVENT";
// The line the bootstrap writes once faulthandler is registered: the marker,
// then the main thread's ident in hex, then " watcher=" and the ident of the
// thread that dumps on Windows (0 on Linux, where the signal handler does).
inline constexpr char kStacksReadyMarker[] = "muster-stacks-ready main=";

struct CaptureTarget {
  int pid = 0;
  int local_rank = 0;
  int global_rank = 0;
  // The worker's MUSTER_STACKS_FILE when it runs under the Python bootstrap;
  // empty for native workers.
  std::string python_dump_file;
};

// Sets the bootstrap's variables in a worker's environment when `stacks_file`
// is not empty (a Python worker): the file, and the signal (Linux) or the
// event's name prefix (Windows).
void AddStacksEnv(const std::string& stacks_file,
                  std::map<std::string, std::string>* env);

// Local rank i is pids[i], global rank rank_offset + i; stacks_files as
// RoundWorkers::stacks_files.
std::vector<CaptureTarget> CaptureTargets(
    const std::vector<int>& pids, int rank_offset,
    const std::vector<std::string>& stacks_files);

// The threads in a faulthandler dump (Python function names, innermost
// first, the bootstrap's own runpy frames left out); the thread whose ident
// is main_ident is marked main and comes first; the bootstrap's dumping
// thread (watcher_ident, when not 0) is left out. Pure.
std::vector<v1::ThreadStack> ParsePythonDump(const std::string& text,
                                             uint64_t main_ident,
                                             uint64_t watcher_ident = 0);

// One worker, up to `deadline`.
v1::RankStacks CaptureWorker(const CaptureTarget& target, absl::Time deadline);

// Thread-safe: the agent's loop sets the workers, the session's capture
// thread and the watchdog capture.
class StackCapturer {
 public:
  // The workers to read from now on, and the node they run on.
  void SetWorkers(std::vector<CaptureTarget> workers, std::string hostname,
                  std::string node_id);
  void Clear() { SetWorkers({}, "", ""); }

  // Every worker's stacks, one at a time (two tracers of one process would
  // refuse each other), within `timeout`.
  v1::StacksReport Capture(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  std::vector<CaptureTarget> workers_ ABSL_GUARDED_BY(mu_);
  std::string hostname_ ABSL_GUARDED_BY(mu_);
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  absl::Mutex capture_mu_;  // one capture at a time
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_STACK_CAPTURE_H_
