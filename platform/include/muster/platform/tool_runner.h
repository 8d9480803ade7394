// Runs a short external command (iptables -S, nft list ruleset, ufw status)
// with a deadline and returns what it printed: how `muster doctor` reads the
// firewall. Not for workers (those go through the process launcher).
#ifndef MUSTER_PLATFORM_TOOL_RUNNER_H_
#define MUSTER_PLATFORM_TOOL_RUNNER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace muster::platform {

struct ToolResult {
  bool found = false;      // the executable exists
  bool timed_out = false;  // killed at the deadline
  int exit_code = -1;      // 128 + signal when killed by one
  std::string output;      // stdout and stderr together (first 4 MiB)
  std::string path;        // where the executable was found
};

// Thread-safe.
class ToolRunner {
 public:
  virtual ~ToolRunner() = default;
  // Runs argv[0] (looked up in env's PATH, then the sbin and bin folders)
  // with `argv`, `env` plus LC_ALL=C, no standard input, in its own process
  // group. Blocks until it exits, or `timeout` passes and the group is killed
  // (then at most 2 s more to reap it). Windows: argv[0] as the launcher
  // finds programs (PATH, PATHEXT, the system directories), `env` as given,
  // in its own job object, terminated whole at the deadline.
  virtual ToolResult Run(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env,
                         absl::Duration timeout) = 0;
};

// Runs real commands (posix/tool_runner.cc, windows/tool_runner_windows.cc).
// Never null.
ToolRunner& SystemToolRunner();

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_TOOL_RUNNER_H_
