// The coordinator's job phases and the table of the transitions between them:
// every change of a Job's state (Job::state, and Job::adopting, which splits
// OPEN in two) goes through Coordinator::Impl::Transition, which checks it
// against this table (a transition the table does not list is a bug: logged,
// and tested by job_phase_test). JobState (coordinator.h) is what GetStatus
// reports; ADOPTING shows there as OPEN.
//
// clang-format off
//
//   a Join: new job, rerun of an ended one, or an OPEN job whose agents all left
//        │                     (a fresh Job is OPEN; its first round opens)
//        ▼     ┌──────┐ a round opens: the first, or after an abandoned OPEN job restarts
//   ┌──────────┴─┐    │
//   │    OPEN    │ ◄──┘ ◄──────────────────────────────────────────────┐
//   └┬───┬───┬─┬─┘ ◄──────────────────────┐                            │
//    │   │   │ │ a new job's first Join    │ a claim that does not fit,│
//    │   │   │ │ claims a running round    │ adoption_grace passed, or │
//    │   │   │ │ (a restarted musterd)     │ the job's agents all left │
//    │   │   │ ▼                           │ (the claimers re-form)    │
//    │   │   │ ┌────────────┐ ─────────────┘                           │
//    │   │   │ │  ADOPTING  │                                          │
//    │   │   │ └─────┬──────┘ every member of the claimed round back:  │
//    │   │   │       │        RoundReady as claimed, workers run on    │
//    │   │   │       ▼                                                 │
//    │   │   └──► ┌────────────┐  Restart{round} to every member: a    │
//    │   │ round  │  RUNNING   │ ─ member lost, a newcomer below max, ─┘
//    │   │ closes └─┬────────┬─┘  a worker failure with restarts left,
//    │   │ (below)  │        │    or --recovery=in-place (keepers first
//    │   │          │        │    in the next round's order)
//    │   │          │        │ every member reported success
//    │   │          │        ▼
//    │   │          │   ┌───────────┐
//    │   │          │   │ SUCCEEDED │ JobSucceeded to every agent ──┐
//    │   │          │   └───────────┘                               │ a Join
//    │   │          │ no restarts left, a preflight pair            │ reruns it
//    │   ▼          ▼ that cannot connect                           │ (→ OPEN)
//    │  ┌──────────┐                                                │
//    │  │  FAILED  │ JobFailed{root_cause} to every agent ──────────┤
//    │  └──────────┘                                                │
//    │  join_timeout with fewer than min joined, or ranks that      │
//    │  cannot be assigned (OPEN → FAILED)                          │
//    └──── OPEN → RUNNING: max joined; or min joined and last call  │
//          or join_timeout passed; or, re-forming, min joined and   │
//          every survivor back. RoundReady to every member          │
//                                                                   ▼
//                                                                 OPEN
// Forbidden: everything else, e.g. RUNNING → ADOPTING (only a job the
// server did not know adopts), ADOPTING → FAILED or SUCCEEDED (an adopted
// round ends only once RUNNING), SUCCEEDED ↔ FAILED, any ended → RUNNING.
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
