// The elastic agent's states and the table of the transitions between them:
// every change of ElasticAgent::Impl::state_ goes through Impl::Transition,
// which checks it against this table (a transition the table does not list is
// a bug: logged, and tested by agent_state_test).
//
// clang-format off
//
//                     Restart (restart mode, or workers not kept),
//                     Waiting for a later round, lease fence: Join again
//          +-----------------------------------------------------------+
//          |                                                           |
//          v          RoundReady: workers started                      |
//  --> JOINING ---------------------------------------------------> RUNNING <-+
//       |  ^  ^                                                     | |  ^ |  |
//       |  |  |  Restart, lease fence: Join again                   | |  | +--+ RoundReady of a
//       |  |  +--------------------------------------------+        | |  |      later round after
//       |  |                                               |        | |  |      a reconnect
//       |  |  a kept worker ended,    +-------------+      |        | |  |
//       |  +--lease fence: Join ------|   KEEPING   |      |        | |  | RoundReady: `running`
//       |     again (a newcomer)      +-------------+      |        | |  | to each kept worker,
//       |                              ^       |           |        | |  | no process started
//       |                              |       +-----------|--------|-|--+
//       |                              +-------------------|--------+ |
//       |   round ended (Restart, Waiting for a later      |          | workers ended: reported;
//       |   round) under --recovery=in-place, every        |          | preflight failed
//       |   worker running with a `hello` of its pid:      |          v
//       |   `changing` written, Join with kept workers     +------ REPORTED <-+
//       |                                                             |  |    | preflight failed
//       +------------------- RoundReady: preflight failed ----------->+  +----+ again
//                                                                     |
//                                       RoundReady of a later round --+--> RUNNING
//
// JOINING -> JOINING: the lease fence, or a rejoin, while it waits.
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
