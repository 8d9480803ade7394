// The elastic agent's states and the table of the transitions between them:
// every change of ElasticAgent::Impl::state_ goes through Impl::Transition,
// which checks it against this table (a transition the table does not list is
// a bug: logged, and tested by agent_state_test). Which transition an event
// makes is Decide's (agent/src/agent_decisions.h).
//
// clang-format off
//
//                       RoundReady: workers started
//   start --> JOINING -------------------------------------------> RUNNING --+
//              | ^ ^ ^                                               | | ^  |  a later round's
//              | | | |  Restart (restart mode, or workers not kept), | | |  |  RoundReady after a
//              | | | +--Waiting for a later round, lease fence ------+ | +--+  reconnect
//              | | |                                                   |
//              | | |                         workers ended: reported   |  round ended (Restart, or
//   RoundReady:| | |  Restart,                preflight failed          |  Waiting for a later round),
//   preflight  | | |  lease fence   +----------------------------------+  --recovery=in-place, every
//   failed     | | |                v                                  |  worker with a `hello` of its
//              | | +------------ REPORTED --+ preflight failed again   |  pid: `changing` written,
//              +-|-------------->   | ^     |                          |  Join with kept workers
//                |                  | +-----+                          v
//                |                  +-- a later round's RoundReady  KEEPING
//                |                      after a reconnect --> RUNNING  |  |
//                |  a kept worker ended, lease fence: Join             |  | RoundReady: `running`
//                +-------- again without kept (a newcomer) ------------+  | to each kept worker,
//                                                                          | no process started
//                                                                          +--> RUNNING
//
// JOINING -> JOINING: the lease fence, or a rejoin, while it waits.
// Forbidden: JOINING/REPORTED/KEEPING -> KEEPING, KEEPING -> REPORTED.
// The verdicts (JobSucceeded, JobFailed) and a stop signal end Run from any
// state: exits, not transitions.
//
// clang-format on
#ifndef MUSTER_AGENT_SRC_AGENT_STATE_H_
#define MUSTER_AGENT_SRC_AGENT_STATE_H_

namespace muster::agent {

enum class AgentState {
  kJoining,   // Join sent; waiting for RoundReady (no workers)
  kRunning,   // workers of the current round are running
  kReported,  // workers ended and the outcome was reported; waiting for the
              // server's verdict
  kKeeping,   // --recovery=in-place: the round ended, the workers run on
              // (told `changing`); Join sent claiming them
};

inline constexpr int kAgentStateCount = 4;

// "JOINING", "RUNNING", "REPORTED", "KEEPING" (also /healthz's state).
const char* AgentStateName(AgentState state);

// Whether the table has the transition from -> to.
bool TransitionAllowed(AgentState from, AgentState to);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_AGENT_STATE_H_
