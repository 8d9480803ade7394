#include "agent/src/agent_decisions.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/agent/exit_codes.h"
#include "muster/platform/signals.h"

namespace muster::agent {
namespace {

using platform::kSignalTerminate;

AgentAction Act(ActionKind kind) {
  AgentAction a;
  a.kind = kind;
  return a;
}
AgentAction Transition(AgentState to, std::string why) {
  AgentAction a = Act(ActionKind::kTransition);
  a.to = to;
  a.reason = std::move(why);
  return a;
}
AgentAction Log(LogLevel level, std::string text) {
  AgentAction a = Act(ActionKind::kLog);
  a.level = level;
  a.reason = std::move(text);
  return a;
}
AgentAction WithReason(ActionKind kind, std::string reason) {
  AgentAction a = Act(kind);
  a.reason = std::move(reason);
  return a;
}
AgentAction StopWorkers(int signal) {
  AgentAction a = Act(ActionKind::kStopWorkers);
  a.signal = signal;
  return a;
}
AgentAction Exit(int code) {
  AgentAction a = Act(ActionKind::kExit);
  a.exit_code = code;
  return a;
}

using Actions = std::vector<AgentAction>;

// A stop signal (also one that ended a reconnect): forwarded to the workers,
// which are then stopped with it; Leave, and 128 + the signal.
Actions OnStopSignal(int sig, bool workers_running) {
  Actions out = {Log(LogLevel::kWarning,
                     absl::StrCat("received ", platform::SignalName(sig),
                                  "; stopping workers"))};
  if (workers_running) {
    AgentAction forward = Act(ActionKind::kForwardSignal);
    forward.signal = sig;
    out.push_back(forward);
  }
  out.push_back(StopWorkers(sig));
  out.push_back(
      WithReason(ActionKind::kLeave,
                 absl::StrCat("agent stopped by ", platform::SignalName(sig))));
  out.push_back(Exit(kExitSignalBase + sig));
  return out;
}

// Whether the round's end may keep the workers (--recovery=in-place).
bool MayKeep(AgentState state, const AgentFacts& f) {
  return f.in_place && state == AgentState::kRunning && f.workers_running &&
         f.keep_workers_possible;
}

// --recovery=in-place: the round ended and every worker can be kept:
// `changing` to each (a step: a failed write makes the workers not keepable),
// KEEPING, and the Join that claims them.
Actions KeepAndRejoin(std::string reason) {
  return {WithReason(ActionKind::kKeepWorkers, std::move(reason)),
          Transition(AgentState::kKeeping, "round ended, workers kept"),
          Act(ActionKind::kSendJoin)};
}

Actions OnWaiting(AgentState state, const AgentEvent& e, const AgentFacts& f) {
  Actions out;
  // After a reconnect, workers of the last round may still run here. When the
  // server already forms a later round (this node was lost and the others
  // went on), theirs is over. Otherwise (musterd restarted: it forms round 1
  // again) they carry on until a RoundReady says whether the round re-formed
  // as it was. Kept workers (KEEPING) wait for exactly that later round.
  if (f.workers_running && state != AgentState::kKeeping && e.round > f.round) {
    if (MayKeep(state, f)) {
      out = KeepAndRejoin(
          absl::StrCat("round ", f.round, " went on without this node"));
    } else {
      out.push_back(Log(LogLevel::kWarning,
                        absl::StrCat("round ", f.round,
                                     " went on without this node; stopping "
                                     "its workers")));
      out.push_back(StopWorkers(kSignalTerminate));
      out.push_back(
          Transition(AgentState::kJoining, "Waiting for a later round"));
    }
  }
  out.push_back(Act(ActionKind::kLogWaiting));
  return out;
}

Actions OnRoundReady(AgentState state, const AgentFacts& f) {
  Actions out;
  bool workers = f.workers_running;
  if (state == AgentState::kKeeping) {
    // --recovery=in-place: the kept workers are told the new round; none
    // start.
    if (f.kept_workers_alive) {
      return {
          Act(ActionKind::kResumeKeptWorkers),
          Transition(AgentState::kRunning, "RoundReady: kept workers told")};
    }
    out.push_back(StopWorkers(kSignalTerminate));
    out.push_back(
        Transition(AgentState::kJoining, "kept workers cannot go on"));
    state = AgentState::kJoining;
    workers = false;
  }
  if (f.same_round && (workers || state == AgentState::kReported)) {
    // The same round again after a reconnect: the workers carry on, and an
    // outcome this agent reported while the server was away is reported
    // again.
    if (state == AgentState::kReported && f.reported)
      out.push_back(Act(ActionKind::kResendReport));
    if (state == AgentState::kJoining) {
      out.push_back(Transition(AgentState::kRunning,
                               "RoundReady resent after a reconnect"));
    }
    return out;
  }
  // Workers of an earlier round still running (the session was lost and the
  // round moved on without this node) are stopped before the new round's
  // start.
  if (workers) out.push_back(StopWorkers(kSignalTerminate));
  out.push_back(Act(ActionKind::kStartRound));
  return out;
}

Actions OnRestart(AgentState state, const AgentEvent& e, const AgentFacts& f) {
  if (MayKeep(state, f)) return KeepAndRejoin(e.reason);
  return {Log(LogLevel::kWarning,
              absl::StrCat("round ", e.round, " ended: ", e.reason,
                           "; stopping workers and rejoining")),
          StopWorkers(kSignalTerminate),
          WithReason(ActionKind::kCheckHealth, "before rejoining"),
          Transition(AgentState::kJoining, "rejoin"),
          Act(ActionKind::kSendJoin)};
}

Actions OnWorkersEnded(AgentState state, const AgentEvent& e) {
  if (state == AgentState::kKeeping) {
    // A kept worker that ended stops the others; the node joins again without
    // kept workers: a newcomer.
    return {Log(LogLevel::kWarning,
                absl::StrCat("a kept worker of round ", e.round,
                             " ended while the next round formed; stopping "
                             "this node's workers (new ones start in the next "
                             "round)")),
            StopWorkers(kSignalTerminate),
            Transition(AgentState::kJoining, "a kept worker ended"),
            Act(ActionKind::kSendJoin)};
  }
  if (state != AgentState::kRunning) return {};
  return {Act(ActionKind::kReportOutcome),
          Transition(AgentState::kReported, "workers ended"),
          Act(ActionKind::kSendReport)};
}

Actions OnFenceDue(const AgentFacts& f) {
  // Lease fencing: the session is as good as lost.
  Actions out = {Act(ActionKind::kFenceWorkers),
                 Transition(AgentState::kJoining, "lease fence")};
  if (!f.reconnecting) {
    out.push_back(
        WithReason(ActionKind::kReconnect,
                   "lease fence: no lease renewal from the rendezvous server; "
                   "reconnecting"));
  }
  return out;
}

// musterd excluded this node (a straggler replaced or excluded): it stops the
// workers as for a verdict, leaves and exits kExitExcluded, which tells a
// scheduler to retry elsewhere. musterd ends the round for the others itself.
// An Excluded for a round before this node's last one is stale: it was meant
// for a round already over, and this node has since been let in again. A
// later round's counts: it may come while this node joins the next round.
Actions OnExcluded(const AgentEvent& e, const AgentFacts& f) {
  if (e.round < f.round) {
    return {
        Log(LogLevel::kWarning, absl::StrCat("Excluded for round ", e.round,
                                             " ignored: this node runs round ",
                                             f.round, " (", e.reason, ")"))};
  }
  std::string why = absl::StrCat("musterd excluded this node from job ",
                                 f.job_id, ": ", e.reason);
  return {Log(LogLevel::kError, why), StopWorkers(kSignalTerminate),
          WithReason(ActionKind::kLeave, std::move(why)), Exit(kExitExcluded)};
}

Actions OnServerMessage(AgentState state, const AgentEvent& e,
                        const AgentFacts& f) {
  switch (e.kind) {
    case EventKind::kWaiting:
      return OnWaiting(state, e, f);
    case EventKind::kRoundReady:
      return OnRoundReady(state, f);
    case EventKind::kRestart:
      return OnRestart(state, e, f);
    case EventKind::kJobSucceeded:
      return {
          StopWorkers(kSignalTerminate),
          Log(LogLevel::kInfo, absl::StrCat("job '", f.job_id, "' succeeded")),
          Exit(kExitSuccess)};
    case EventKind::kJobFailed:
      return {StopWorkers(kSignalTerminate),
              Act(ActionKind::kPrintFailureSummary), Exit(kExitJobFailed)};
    case EventKind::kCaptureHang:
      if (state != AgentState::kRunning || !f.workers_running ||
          e.round != f.round) {
        return {Log(LogLevel::kDebug,
                    absl::StrCat("CaptureHang for round ", e.round,
                                 " ignored (this node is not running it)"))};
      }
      return {WithReason(ActionKind::kCaptureHang, e.reason)};
    case EventKind::kExcluded:
      return OnExcluded(e, f);
    default:
      return {};
  }
}

}  // namespace

int ExitCodeForSessionEnd(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInvalidArgument:
    // A missing or wrong job token, or a node id taken by another agent:
    // retrying cannot help.
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kAlreadyExists:
      return kExitConfigError;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    default:
      return kExitJobFailed;
  }
}

std::vector<AgentAction> Decide(AgentState state, const AgentEvent& e,
                                const AgentFacts& f) {
  switch (e.kind) {
    case EventKind::kWorkersEnded:
      return OnWorkersEnded(state, e);
    case EventKind::kWatchdogHung: {
      if (state != AgentState::kRunning || !f.workers_running ||
          e.hung_local_ranks.empty()) {
        return {};
      }
      AgentAction kill = Act(ActionKind::kKillHung);
      kill.hung_local_ranks = e.hung_local_ranks;
      return {kill};
    }
    case EventKind::kSessionLost:
      return {WithReason(ActionKind::kReconnect, e.reason)};
    case EventKind::kSessionEnded:
      // The session is over without a verdict.
      return {Log(LogLevel::kError, e.reason),
              Exit(ExitCodeForSessionEnd(e.code))};
    case EventKind::kFenceDue:
      return OnFenceDue(f);
    case EventKind::kStopSignal:
      return OnStopSignal(e.signal, f.workers_running);
    case EventKind::kPreflightBlocked:
      return {Transition(AgentState::kReported, "preflight failed"),
              Act(ActionKind::kSendReport)};
    case EventKind::kLeaseNotHeld:
      return {Log(LogLevel::kWarning,
                  absl::StrCat("round ", e.round,
                               ": this node's lease is about to end; not "
                               "starting its workers")),
              Act(ActionKind::kFencePending)};
    case EventKind::kStartFailed:
      // The program cannot run here (not found, not executable): no restart
      // can mend that.
      return {Log(LogLevel::kError, e.reason),
              WithReason(ActionKind::kLeave,
                         absl::StrCat("cannot start the workers: ", e.reason)),
              Exit(kExitConfigError)};
    case EventKind::kWorkersStarted:
      return {Transition(AgentState::kRunning, "RoundReady: workers started")};
    case EventKind::kHealthCheckFailed:
      return {Exit(e.exit_code)};
    case EventKind::kReconnectFailed:
      if (f.stop_signal != 0) {
        return OnStopSignal(f.stop_signal, f.workers_running);
      }
      return {Exit(kExitUnavailable)};
    default:
      return OnServerMessage(state, e, f);
  }
}

bool AgentAction::operator==(const AgentAction& o) const {
  return kind == o.kind && to == o.to && reason == o.reason &&
         level == o.level && signal == o.signal && exit_code == o.exit_code &&
         hung_local_ranks == o.hung_local_ranks;
}

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kWaiting:
      return "Waiting";
    case EventKind::kRoundReady:
      return "RoundReady";
    case EventKind::kRestart:
      return "Restart";
    case EventKind::kJobSucceeded:
      return "JobSucceeded";
    case EventKind::kJobFailed:
      return "JobFailed";
    case EventKind::kCaptureHang:
      return "CaptureHang";
    case EventKind::kExcluded:
      return "Excluded";
    case EventKind::kOtherMessage:
      return "OtherMessage";
    case EventKind::kWorkersEnded:
      return "WorkersEnded";
    case EventKind::kWatchdogHung:
      return "WatchdogHung";
    case EventKind::kSessionLost:
      return "SessionLost";
    case EventKind::kSessionEnded:
      return "SessionEnded";
    case EventKind::kFenceDue:
      return "FenceDue";
    case EventKind::kStopSignal:
      return "StopSignal";
    case EventKind::kPreflightBlocked:
      return "PreflightBlocked";
    case EventKind::kLeaseNotHeld:
      return "LeaseNotHeld";
    case EventKind::kStartFailed:
      return "StartFailed";
    case EventKind::kWorkersStarted:
      return "WorkersStarted";
    case EventKind::kHealthCheckFailed:
      return "HealthCheckFailed";
    case EventKind::kReconnectFailed:
      return "ReconnectFailed";
  }
  return "?";
}

std::string DescribeAction(const AgentAction& a) {
  static constexpr const char* kNames[] = {"Transition",
                                           "Log",
                                           "ForwardSignal",
                                           "StopWorkers",
                                           "FenceWorkers",
                                           "ReportOutcome",
                                           "SendReport",
                                           "ResendReport",
                                           "SendJoin",
                                           "KeepWorkers",
                                           "ResumeKeptWorkers",
                                           "StartRound",
                                           "LogWaiting",
                                           "CaptureHang",
                                           "KillHung",
                                           "CheckHealth",
                                           "Reconnect",
                                           "FencePending",
                                           "PrintFailureSummary",
                                           "Leave",
                                           "Exit"};
  static_assert(std::size(kNames) == static_cast<size_t>(ActionKind::kExit) + 1,
                "a name for each ActionKind, in order");
  std::string out = kNames[static_cast<int>(a.kind)];
  switch (a.kind) {
    case ActionKind::kTransition:
      absl::StrAppend(&out, "(", AgentStateName(a.to), ": ", a.reason, ")");
      break;
    case ActionKind::kForwardSignal:
    case ActionKind::kStopWorkers:
      absl::StrAppend(&out, "(", a.signal, ")");
      break;
    case ActionKind::kExit:
      absl::StrAppend(&out, "(", a.exit_code, ")");
      break;
    case ActionKind::kKillHung:
      absl::StrAppend(&out, "(", absl::StrJoin(a.hung_local_ranks, ","), ")");
      break;
    default:
      if (!a.reason.empty()) absl::StrAppend(&out, "(", a.reason, ")");
  }
  return out;
}

}  // namespace muster::agent
