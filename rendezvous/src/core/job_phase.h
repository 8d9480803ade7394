// The coordinator's job phases and the table of the transitions between them:
// every change of a Job's state (Job::state, and Job::adopting, which splits
// OPEN in two) goes through Coordinator::Impl::Transition, which checks it
// against this table (a transition the table does not list is a bug: logged,
// and tested by job_phase_test). JobState (coordinator.h) is what GetStatus
// reports; ADOPTING shows there as OPEN. Drawn from the table:
//
// clang-format off
//
//     a Join: a new job; a rerun of an ended job once its agents are gone
//     (SUCCEEDED/FAILED → OPEN); an OPEN or ADOPTING job whose agents all left
//     (→ OPEN)
//             │
//             │
//             │                   a round opens (a fresh job's first)
//             │                       ┌─────┐
//             ▼                       ▼     │
//        ┌──────────────────────────────────┴─┐ a new job's first Join claims a     ┌────────────┐
//        │                OPEN                │────────────────────────────────────►│  ADOPTING  │
//        └─┬───────────────┬──────────────────┘◄────────────────────────────────────│  (reported │
//          │               │          ▲         running round (a restarted musterd);│  as OPEN)  │
//          │               │          │         back when a claim does not fit, or  └─────┬──────┘
//          │ join_timeout  │ the round│         at adoption_grace: the claimers           │ every
//          │ below min,    │ closes ¹ │         re-form a round                           │ member of
//          │ or ranks      │          │                                                   │ the claimed
//          │ that cannot   │          │ Restart{round} to every                           │ round back:
//          │ be assigned   │          │ member: a member lost, a                          │ RoundReady
//          │               │          │ newcomer below max, a worker                      │ as claimed
//          │               │          │ failure with restarts left;                       │
//          │               │          │ in-place: keepers come first ²                    │
//          │               │          │                                                   │
//          │               ▼          │                                                   │
//          │         ┌────────────────┴─────┐                                             │
//          │         │        RUNNING       │ ◄───────────────────────────────────────────┘
//          │         └─┬──────────────────┬─┘
//          │           │ no restarts      │
//          │           │ left, or a       │ every member reported success
//          │           │ preflight pair   │
//          │           │ that cannot      │
//          │           │ connect          ▼
//          │           │            ┌───────────┐
//          │           │            │ SUCCEEDED │ JobSucceeded to every agent
//          │           │            └───────────┘
//          ▼           ▼
//        ┌────────────────┐
//        │     FAILED     │ JobFailed{root_cause} to every agent
//        └────────────────┘
//
// ¹ max joined; or min joined and last call or join_timeout passed; or, re-forming,
//   min joined and every survivor back. RoundReady to every member.
// ² --recovery=in-place: the keepers rejoin with their workers running and come first
//   in the next round's order (CloseRound).
// Forbidden (job_phase_test): every other pair. Only a job the server did not know
// adopts (RUNNING → ADOPTING); an adopted round ends only once it runs (ADOPTING →
// SUCCEEDED/FAILED); an ended job runs again only through a new round
// (SUCCEEDED/FAILED → RUNNING); and OPEN → SUCCEEDED, RUNNING → RUNNING,
// ADOPTING → ADOPTING, SUCCEEDED ↔ FAILED.
//
// clang-format on
#ifndef MUSTER_RENDEZVOUS_SRC_JOB_PHASE_H_
#define MUSTER_RENDEZVOUS_SRC_JOB_PHASE_H_

#include "muster/rendezvous/coordinator.h"

namespace muster::rendezvous {

enum class JobPhase {
  kOpen,       // a round forms (JobState::kOpen, not adopting)
  kAdopting,   // a restarted musterd waits for a claimed round's members
               // (JobState::kOpen, Job::adopting)
  kRunning,    // JobState::kRunning
  kSucceeded,  // JobState::kSucceeded
  kFailed,     // JobState::kFailed
};

inline constexpr int kJobPhaseCount = 5;

// "OPEN", "ADOPTING", "RUNNING", "SUCCEEDED", "FAILED".
const char* JobPhaseName(JobPhase phase);

// The phase of (state, adopting) and back: the JobState a phase reports.
JobPhase PhaseOf(JobState state, bool adopting);
JobState StateOf(JobPhase phase);

// Whether the table has the transition from -> to.
bool JobTransitionAllowed(JobPhase from, JobPhase to);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_JOB_PHASE_H_
