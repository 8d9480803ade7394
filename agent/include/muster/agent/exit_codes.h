// Exit statuses of the `muster` launcher. Kubernetes podFailurePolicy and
// scripts key on them: a configuration error will not heal by retrying, a job
// failure might.
#ifndef MUSTER_AGENT_EXIT_CODES_H_
#define MUSTER_AGENT_EXIT_CODES_H_

namespace muster::agent {

// An unscoped enum: its values are the process's exit status (an int).
enum ExitCode : int {
  kExitSuccess = 0,
  // The job failed: a worker failed with no restarts left, or the rendezvous
  // gave up.
  kExitJobFailed = 1,
  // Bad flags or configuration (unknown flag, malformed value, program not
  // found, job id reused with other sizes, port taken). Retrying the same
  // command cannot succeed.
  kExitConfigError = 2,
  // The rendezvous server could not be reached.
  kExitUnavailable = 3,
  // This node's --health-check (or `muster doctor --node`) failed or hung:
  // the node is unfit, not the job. The agent left before its round;
  // schedulers replace or drain the node (docs/deployment.md: Kubernetes
  // podFailurePolicy, Slurm requeue on another node).
  kExitHealthCheckFailed = 4,
  // musterd excluded this node from the job (ServerMessage.excluded): a
  // straggler replaced or excluded (--straggler-action). The node, not the
  // job, is at fault: retry on another node, or here after --exclude-cooldown.
  // Schedulers treat it as 4.
  kExitExcluded = 5,
  // Stopped by a signal: 128 + the signal number, as a shell reports it.
  kExitSignalBase = 128,
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_EXIT_CODES_H_
