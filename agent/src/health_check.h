// Node health checks before each round's join (--health-check=CMD,
// --health-check-timeout): the command runs through the shell in its own
// process group; a non-zero exit, or a check still running at the timeout
// (then its whole group is killed and reaped), keeps the node out: the agent
// leaves, prints the command's output and exits kExitHealthCheckFailed
// (exit_codes.h), which schedulers act on (docs/deployment.md). The rest of an
// elastic job forms its round without the node.
#ifndef MUSTER_AGENT_SRC_HEALTH_CHECK_H_
#define MUSTER_AGENT_SRC_HEALTH_CHECK_H_

#include <map>
#include <string>

#include "absl/time/time.h"
#include "muster/platform/tool_runner.h"

namespace muster::agent {

// How a check ended: the shell's run (exit code 127, and an output that says
// so, when the shell was not found) and how long it took.
struct HealthCheckResult {
  bool ok = false;
  platform::ToolResult ran;
  absl::Duration took;
};

// Runs `command` with `env`, up to `timeout`. Blocks.
HealthCheckResult RunHealthCheck(const std::string& command,
                                 const std::map<std::string, std::string>& env,
                                 absl::Duration timeout,
                                 platform::ToolRunner& runner);

// The words for a failed check: what ran, how it ended, its output
// (indented, at most its last 8 KiB) and what happens now.
std::string DescribeHealthCheckFailure(const std::string& command,
                                       absl::Duration timeout,
                                       const HealthCheckResult& result);

// The Leave reason musterd records with the exclusion: "health check failed
// (exit code 3): disk /scratch is read-only" (the output's last line, at most
// 200 characters) or "health check timed out".
std::string HealthCheckLeaveReason(const HealthCheckResult& result);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_HEALTH_CHECK_H_
