#include "agent/src/agent_state.h"

namespace muster::agent {
namespace {

struct Edge {
  AgentState from;
  AgentState to;
};

// The table (the diagram in agent_state.h is drawn from it).
// clang-format off
constexpr Edge kTransitions[] = {
    // A RoundReady: workers started (or, resent after a reconnect, running).
    {AgentState::kJoining,  AgentState::kRunning},
    // A later round's RoundReady after a reconnect: old workers stopped, new
    // ones started.
    {AgentState::kRunning,  AgentState::kRunning},
    {AgentState::kReported, AgentState::kRunning},
    // Workers ended and were reported, or the preflight failed.
    {AgentState::kRunning,  AgentState::kReported},
    {AgentState::kJoining,  AgentState::kReported},
    {AgentState::kReported, AgentState::kReported},
    // Restart, a Waiting for a later round, the lease fence: Join again.
    {AgentState::kRunning,  AgentState::kJoining},
    {AgentState::kReported, AgentState::kJoining},
    {AgentState::kJoining,  AgentState::kJoining},
    // --recovery=in-place: the round ended and the workers are kept ...
    {AgentState::kRunning,  AgentState::kKeeping},
    // ... until the next RoundReady (`running` written) ...
    {AgentState::kKeeping,  AgentState::kRunning},
    // ... or a kept worker ends, or the lease fence stops them.
    {AgentState::kKeeping,  AgentState::kJoining},
};
// clang-format on

}  // namespace

const char* AgentStateName(AgentState state) {
  switch (state) {
    case AgentState::kJoining:
      return "JOINING";
    case AgentState::kRunning:
      return "RUNNING";
    case AgentState::kReported:
      return "REPORTED";
    case AgentState::kKeeping:
      return "KEEPING";
  }
  return "UNKNOWN";
}

bool TransitionAllowed(AgentState from, AgentState to) {
  for (const Edge& e : kTransitions) {
    if (e.from == from && e.to == to) return true;
  }
  return false;
}

}  // namespace muster::agent
