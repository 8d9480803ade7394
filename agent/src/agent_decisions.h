// The agent's decisions as one pure function: Decide(state, event, facts)
// returns the actions to take, in order. ElasticAgent::Impl turns what
// happens (a server message, its workers' end, a lost session, the lease
// fence, a stop signal, the watchdog's verdict, the outcome of one of its own
// steps) into an AgentEvent, gathers the AgentFacts that event needs, calls
// Decide and executes the actions; it decides nothing itself. agent_state.h
// has the states and the table of transitions every kTransition must respect
// (agent_decisions_test checks each row and each event).
//
// clang-format off
//
//   what happens ──► AgentEvent ─┐
//                                ├─► Decide(state_, event, facts) ──► actions ──► Impl executes them
//   Impl's state ──► AgentFacts ─┘        (pure: no I/O, no clock)        │
//                                                                        │ a step (keep, resume, start a
//        ▲                                                               │ round, check health, reconnect)
//        └──── its outcome: a new event, or the same event with a fact ──┘ that ends otherwise
//
// clang-format on
//
// Steps: a few actions are steps whose outcome the executor cannot know
// beforehand (kKeepWorkers and kResumeKeptWorkers write control files,
// kStartRound probes peers, waits for the lease and starts processes,
// kCheckHealth runs a command, kReconnect dials). When a step ends otherwise
// than planned, the rest of the list is dropped and the executor asks Decide
// again: with the same event and the fact the step disproved
// (keep_workers_possible or kept_workers_alive false: a failed write), or with
// the step's own outcome event (kPreflightBlocked, kLeaseNotHeld,
// kStartFailed, kWorkersStarted, kHealthCheckFailed, kReconnectFailed).
#ifndef MUSTER_AGENT_SRC_AGENT_DECISIONS_H_
#define MUSTER_AGENT_SRC_AGENT_DECISIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/src/agent_state.h"
#include "muster/platform/logging.h"

namespace muster::v1 {
class ServerMessage;
}  // namespace muster::v1

namespace muster::agent {

struct GroupStatus;

enum class EventKind {
  // --- a message from the server (v1::ServerMessage's kinds)
  kWaiting,       // round: the round the server forms
  kRoundReady,    // round; facts.same_round, facts.kept_workers_alive
  kRestart,       // round, reason
  kJobSucceeded,  // the verdicts
  kJobFailed,
  kCaptureHang,   // round, reason: musterd saw no rank progress
  kExcluded,      // round, reason: musterd excluded this node from the job
  kOtherMessage,  // taken by the client's reader, or none set: nothing
  // --- this node's workers
  kWorkersEnded,  // RUNNING: the group is no longer running (succeeded
                  // says how); KEEPING: a kept worker ended
  kWatchdogHung,  // hung_local_ranks: --worker-timeout's verdict
  // --- the session and the lease
  kSessionLost,   // reason: the stream broke (UNAVAILABLE)
  kSessionEnded,  // code, reason: the server ended it otherwise
  kFenceDue,      // the lease is about to end (or could not be had)
  kStopSignal,    // signal: SIGINT/SIGTERM/... to the agent
  // --- outcomes of the agent's own steps
  kPreflightBlocked,   // kStartRound: a peer's port is blocked
  kLeaseNotHeld,       // kStartRound: the lease is about to end
  kStartFailed,        // kStartRound: the program cannot run (reason)
  kWorkersStarted,     // kStartRound: the workers run
  kHealthCheckFailed,  // kCheckHealth: exit_code
  kReconnectFailed,    // kReconnect: the window passed (or a stop signal)
};

struct AgentEvent {
  EventKind kind = EventKind::kOtherMessage;
  int64_t round = 0;
  std::string reason;
  // kWorkersEnded (RUNNING): every worker exited 0.
  bool succeeded = false;
  // kSessionEnded: the status the session ended with.
  absl::StatusCode code = absl::StatusCode::kOk;
  int signal = 0;                     // kStopSignal
  std::vector<int> hung_local_ranks;  // kWatchdogHung
  int exit_code = 0;                  // kHealthCheckFailed
  // The executor's payload, never read by Decide: the server message of a
  // message event, the group's status of kWorkersEnded.
  const v1::ServerMessage* message = nullptr;
  const GroupStatus* status = nullptr;
};

// What Decide needs to know besides the state and the event; the executor
// gathers them just before it calls Decide.
struct AgentFacts {
  // --recovery=in-place.
  bool in_place = false;
  // A worker group of the current round exists (running, or ended and not yet
  // let go).
  bool workers_running = false;
  // The round this node's workers were last started for (0: none yet).
  int64_t round = 0;
  // Restart/Waiting: in-place and RUNNING aside, whether the workers can be
  // kept: a control channel per worker, every one runs, each `hello` names
  // its pid. Gathered only for those events.
  bool keep_workers_possible = false;
  // RoundReady in KEEPING: every kept worker still runs.
  bool kept_workers_alive = false;
  // RoundReady: the same round as the one this node's workers run (or ran):
  // same round, ranks, master and store namespace (a resend after a
  // reconnect).
  bool same_round = false;
  // A WorkersSucceeded/WorkersFailed/PreflightFailed was reported for the
  // current round (kept for a resend).
  bool reported = false;
  // A stop signal came (kReconnectFailed: the reconnect ended for it).
  int stop_signal = 0;
  // kFenceDue while the agent is already reconnecting.
  bool reconnecting = false;
  // The job's id, for the verdict's line in the log.
  std::string job_id;
};

enum class ActionKind {
  kTransition,         // to, reason: state_ = to (agent_state.h's table)
  kLog,                // level, text
  kForwardSignal,      // signal: to every worker, without waiting
  kStopWorkers,        // signal: stop the group (the stop grace, then kill)
  kFenceWorkers,       // stop the group within the lease's fence grace
  kReportOutcome,      // the group's end as WorkersSucceeded/WorkersFailed
                       // (the rest stopped first); sent by kSendReport
  kSendReport,         // the report made last, kept for a resend
  kResendReport,       // the report kept, again (after a reconnect)
  kSendJoin,           // Join, with the claim of the current round
  kKeepWorkers,        // step, reason: `changing` to each worker
  kResumeKeptWorkers,  // step: `running` with the new round to each worker,
                       // the watchdog's count from now
  kStartRound,         // step: the new round's preflight, lease, workers
  kLogWaiting,         // the Waiting's counts, when they changed
  kCaptureHang,        // reason: hang report, every local worker killed
  kKillHung,           // hung_local_ranks: hang report, those killed
  kCheckHealth,        // step: --health-check before rejoining
  kReconnect,          // step, reason: a new session, the node id kept
  kFencePending,       // the fence is due at the next turn of the loop
  kPrintFailureSummary,
  kLeave,  // reason: Leave{reason}, the session closed
  kExit,   // exit_code: everything shut down, Run returns it
};

struct AgentAction {
  ActionKind kind = ActionKind::kLog;
  AgentState to = AgentState::kJoining;  // kTransition
  std::string reason;  // kTransition, kKeepWorkers, kCaptureHang, kReconnect,
                       // kLeave, kLog's text
  LogLevel level = LogLevel::kInfo;   // kLog
  int signal = 0;                     // kForwardSignal, kStopWorkers
  int exit_code = 0;                  // kExit
  std::vector<int> hung_local_ranks;  // kKillHung

  bool operator==(const AgentAction& o) const;
};

// "kStopWorkers(15)", "kTransition(RUNNING: why)", ... for tests and logs.
std::string DescribeAction(const AgentAction& action);
const char* EventKindName(EventKind kind);

// The actions for `event` in `state`, in order. Pure: depends on its arguments
// only. The verdicts, a stop signal, a failed start or health check and a
// session that cannot be resumed end in kExit (from any state); every
// kTransition is one agent_state.h's table has.
std::vector<AgentAction> Decide(AgentState state, const AgentEvent& event,
                                const AgentFacts& facts);

// The agent's exit status for a session the server ended with `code` (not
// UNAVAILABLE, which is a lost session): a refused Join, a missing or wrong
// job token or a node id taken by another agent cannot heal by retrying.
int ExitCodeForSessionEnd(absl::StatusCode code);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_AGENT_DECISIONS_H_
