// Exit statuses of the `muster` launcher. Kubernetes podFailurePolicy and
// scripts key on them: a configuration error will not heal by retrying, a job
// failure might.
#ifndef MUSTER_AGENT_EXIT_CODES_H_
#define MUSTER_AGENT_EXIT_CODES_H_

namespace muster::agent {

inline constexpr int kExitSuccess = 0;
// The job failed: a worker failed with no restarts left, or the rendezvous gave
// up.
inline constexpr int kExitJobFailed = 1;
// Bad flags or configuration (unknown flag, malformed value, program not found,
// job id reused with other sizes, port taken). Retrying the same command cannot
// succeed.
inline constexpr int kExitConfigError = 2;
// The rendezvous server could not be reached.
inline constexpr int kExitUnavailable = 3;
// Stopped by a signal: 128 + the signal number, as a shell reports it.
inline constexpr int kExitSignalBase = 128;

}  // namespace muster::agent

#endif  // MUSTER_AGENT_EXIT_CODES_H_
