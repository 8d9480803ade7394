#include "rendezvous/src/core/job_phase.h"

namespace muster::rendezvous {
namespace {

struct Edge {
  JobPhase from;
  JobPhase to;
};

// The table (the diagram in job_phase.h is drawn from it).
// clang-format off
constexpr Edge kTransitions[] = {
    // A round opens: a fresh job's first (a fresh Job is OPEN), or an OPEN
    // job whose agents all left starts afresh on a Join.
    {JobPhase::kOpen,      JobPhase::kOpen},
    // A new job's first Join claims a running round (a restarted musterd).
    {JobPhase::kOpen,      JobPhase::kAdopting},
    // Every member of the claimed round is back: it runs on as claimed.
    {JobPhase::kAdopting,  JobPhase::kRunning},
    // A claim that does not fit, adoption_grace passed, or the agents all left.
    {JobPhase::kAdopting,  JobPhase::kOpen},
    // The round closes.
    {JobPhase::kOpen,      JobPhase::kRunning},
    // join_timeout with fewer than min_nodes, or ranks that cannot be assigned.
    {JobPhase::kOpen,      JobPhase::kFailed},
    // Restart: a member lost, a newcomer, a worker failure with restarts
    // left, or in-place recovery (the next round forms with keepers first).
    {JobPhase::kRunning,   JobPhase::kOpen},
    // Every member reported success.
    {JobPhase::kRunning,   JobPhase::kSucceeded},
    // No restarts left, or a preflight pair that cannot connect.
    {JobPhase::kRunning,   JobPhase::kFailed},
    // A Join reruns an ended job once its agents are gone.
    {JobPhase::kSucceeded, JobPhase::kOpen},
    {JobPhase::kFailed,    JobPhase::kOpen},
};
// clang-format on

}  // namespace

const char* JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kOpen:
      return "OPEN";
    case JobPhase::kAdopting:
      return "ADOPTING";
    case JobPhase::kRunning:
      return "RUNNING";
    case JobPhase::kSucceeded:
      return "SUCCEEDED";
    case JobPhase::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

JobPhase PhaseOf(JobState state, bool adopting) {
  switch (state) {
    case JobState::kOpen:
      return adopting ? JobPhase::kAdopting : JobPhase::kOpen;
    case JobState::kRunning:
      return JobPhase::kRunning;
    case JobState::kSucceeded:
      return JobPhase::kSucceeded;
    case JobState::kFailed:
      return JobPhase::kFailed;
  }
  return JobPhase::kOpen;
}

JobState StateOf(JobPhase phase) {
  switch (phase) {
    case JobPhase::kOpen:
    case JobPhase::kAdopting:
      return JobState::kOpen;
    case JobPhase::kRunning:
      return JobState::kRunning;
    case JobPhase::kSucceeded:
      return JobState::kSucceeded;
    case JobPhase::kFailed:
      return JobState::kFailed;
  }
  return JobState::kOpen;
}

bool JobTransitionAllowed(JobPhase from, JobPhase to) {
  for (const Edge& e : kTransitions) {
    if (e.from == from && e.to == to) return true;
  }
  return false;
}

}  // namespace muster::rendezvous
