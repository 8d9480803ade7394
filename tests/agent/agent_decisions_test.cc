// Decide (agent/src/agent_decisions.h), the agent's decisions as a pure
// function: no process, no socket, no clock. The table walks each row of the
// state table (docs/architecture.md, "The agent's states") and each event;
// a sweep over every state, event and fact checks that every transition
// Decide asks for is one agent_state.h's table has, and that an exit ends the
// list.
#include "agent/src/agent_decisions.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/agent/exit_codes.h"
#include "muster/platform/signals.h"

namespace muster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr AgentState kJoining = AgentState::kJoining;
constexpr AgentState kRunning = AgentState::kRunning;
constexpr AgentState kReported = AgentState::kReported;
constexpr AgentState kKeeping = AgentState::kKeeping;

// The actions as short strings; a log line is "Log" (its words are checked
// apart, below).
std::vector<std::string> Summary(const std::vector<AgentAction>& actions) {
  std::vector<std::string> out;
  for (const AgentAction& a : actions) {
    out.push_back(a.kind == ActionKind::kLog ? "Log" : DescribeAction(a));
  }
  return out;
}

std::string Stop(int sig = platform::kSignalTerminate) {
  return absl::StrCat("StopWorkers(", sig, ")");
}
std::string Exit(int code) { return absl::StrCat("Exit(", code, ")"); }

AgentEvent Event(EventKind kind, int64_t round = 0, std::string reason = "") {
  AgentEvent e;
  e.kind = kind;
  e.round = round;
  e.reason = std::move(reason);
  return e;
}

// Facts of a node whose workers of round 3 run.
AgentFacts Running() {
  AgentFacts f;
  f.workers_running = true;
  f.round = 3;
  f.job_id = "job";
  return f;
}
// ... under --recovery=in-place, every worker with its `hello`.
AgentFacts Keepable() {
  AgentFacts f = Running();
  f.in_place = true;
  f.keep_workers_possible = true;
  return f;
}
AgentFacts NoWorkers() {
  AgentFacts f;
  f.round = 3;
  f.job_id = "job";
  return f;
}

struct Row {
  const char* name;
  AgentState state;
  AgentEvent event;
  AgentFacts facts;
  std::vector<std::string> want;
};

AgentFacts SameRound() {
  AgentFacts f = Running();
  f.same_round = true;
  return f;
}
AgentFacts ReportedSame() {
  AgentFacts f = NoWorkers();
  f.same_round = true;
  f.reported = true;
  return f;
}
AgentFacts KeptAlive() {
  AgentFacts f = Keepable();
  f.kept_workers_alive = true;
  return f;
}
AgentFacts InPlaceNoHello() {
  AgentFacts f = Keepable();
  f.keep_workers_possible = false;
  return f;
}
AgentFacts KeepableSameRound() {
  AgentFacts f = Keepable();
  f.same_round = true;
  return f;
}
constexpr char kReconnectFence[] =
    "Reconnect(lease fence: no lease renewal from the rendezvous server; "
    "reconnecting)";

// JOINING.
std::vector<Row> JoiningRows() {
  return {
      {"JoiningRoundReadyStartsARound",
       kJoining,
       Event(EventKind::kRoundReady),
       NoWorkers(),
       {"StartRound"}},
      {"JoiningWorkersStartedRuns",
       kJoining,
       Event(EventKind::kWorkersStarted),
       Running(),
       {"Transition(RUNNING: RoundReady: workers started)"}},
      {"JoiningRoundReadyResentKeepsTheWorkers",
       kJoining,
       Event(EventKind::kRoundReady),
       SameRound(),
       {"Transition(RUNNING: RoundReady resent after a reconnect)"}},
      {"JoiningPreflightBlockedReports",
       kJoining,
       Event(EventKind::kPreflightBlocked),
       NoWorkers(),
       {"Transition(REPORTED: preflight failed)", "SendReport"}},
      {"JoiningFenceJoinsAgain",
       kJoining,
       Event(EventKind::kFenceDue),
       NoWorkers(),
       {"FenceWorkers", "Transition(JOINING: lease fence)", kReconnectFence}},
      {"JoiningWaitingOnlyLogs",
       kJoining,
       Event(EventKind::kWaiting, 4),
       NoWorkers(),
       {"LogWaiting"}},
      {"JoiningLeaseNotHeldFencesNext",
       kJoining,
       Event(EventKind::kLeaseNotHeld, 4),
       NoWorkers(),
       {"Log", "FencePending"}},
  };
}

// RUNNING.
std::vector<Row> RunningRows() {
  return {
      {"RunningWorkersSucceededReports",
       kRunning,
       [] {
         AgentEvent e = Event(EventKind::kWorkersEnded, 3);
         e.succeeded = true;
         return e;
       }(),
       Running(),
       {"ReportOutcome", "Transition(REPORTED: workers ended)", "SendReport"}},
      {"RunningWorkersFailedReports",
       kRunning,
       Event(EventKind::kWorkersEnded, 3),
       Running(),
       {"ReportOutcome", "Transition(REPORTED: workers ended)", "SendReport"}},
      {"RunningRestartStopsChecksAndRejoins",
       kRunning,
       Event(EventKind::kRestart, 3, "node b lost"),
       Running(),
       {"Log", Stop(), "CheckHealth(before rejoining)",
        "Transition(JOINING: rejoin)", "SendJoin"}},
      {"RunningRestartInPlaceWithoutHelloRestarts",
       kRunning,
       Event(EventKind::kRestart, 3, "node b lost"),
       InPlaceNoHello(),
       {"Log", Stop(), "CheckHealth(before rejoining)",
        "Transition(JOINING: rejoin)", "SendJoin"}},
      {"RunningWaitingForALaterRoundStops",
       kRunning,
       Event(EventKind::kWaiting, 4),
       Running(),
       {"Log", Stop(), "Transition(JOINING: Waiting for a later round)",
        "LogWaiting"}},
      {"RunningWaitingForTheSameRoundCarriesOn",
       kRunning,
       Event(EventKind::kWaiting, 1),
       Running(),
       {"LogWaiting"}},
      {"RunningFenceStopsAndReconnects",
       kRunning,
       Event(EventKind::kFenceDue),
       Running(),
       {"FenceWorkers", "Transition(JOINING: lease fence)", kReconnectFence}},
      {"RunningFenceWhileReconnectingDoesNotReconnectAgain",
       kRunning,
       Event(EventKind::kFenceDue),
       [] {
         AgentFacts f = Running();
         f.reconnecting = true;
         return f;
       }(),
       {"FenceWorkers", "Transition(JOINING: lease fence)"}},
      {"RunningLaterRoundAfterAReconnectRestarts",
       kRunning,
       Event(EventKind::kRoundReady, 4),
       Running(),
       {Stop(), "StartRound"}},
      {"RunningSameRoundAgainCarriesOn",
       kRunning,
       Event(EventKind::kRoundReady, 3),
       SameRound(),
       {}},
      {"RunningRestartInPlaceKeeps",
       kRunning,
       Event(EventKind::kRestart, 3, "node b lost"),
       Keepable(),
       {"KeepWorkers(node b lost)",
        "Transition(KEEPING: round ended, workers kept)", "SendJoin"}},
      {"RunningWaitingForALaterRoundInPlaceKeeps",
       kRunning,
       Event(EventKind::kWaiting, 4),
       Keepable(),
       {"KeepWorkers(round 3 went on without this node)",
        "Transition(KEEPING: round ended, workers kept)", "SendJoin",
        "LogWaiting"}},
      {"RunningWatchdogKillsTheHung",
       kRunning,
       [] {
         AgentEvent e = Event(EventKind::kWatchdogHung);
         e.hung_local_ranks = {0, 2};
         return e;
       }(),
       Running(),
       {"KillHung(0,2)"}},
      {"RunningCaptureHangOfItsRound",
       kRunning,
       Event(EventKind::kCaptureHang, 3, "no progress"),
       Running(),
       {"CaptureHang(no progress)"}},
      {"RunningCaptureHangOfAnotherRoundIgnored",
       kRunning,
       Event(EventKind::kCaptureHang, 2, "no progress"),
       Running(),
       {"Log"}},
  };
}

// REPORTED.
std::vector<Row> ReportedRows() {
  return {
      {"ReportedRestartRejoins",
       kReported,
       Event(EventKind::kRestart, 3, "rank 1 failed"),
       NoWorkers(),
       {"Log", Stop(), "CheckHealth(before rejoining)",
        "Transition(JOINING: rejoin)", "SendJoin"}},
      {"ReportedFenceRejoins",
       kReported,
       Event(EventKind::kFenceDue),
       NoWorkers(),
       {"FenceWorkers", "Transition(JOINING: lease fence)", kReconnectFence}},
      {"ReportedLaterRoundStarts",
       kReported,
       Event(EventKind::kRoundReady, 4),
       NoWorkers(),
       {"StartRound"}},
      {"ReportedSameRoundResendsTheReport",
       kReported,
       Event(EventKind::kRoundReady, 3),
       ReportedSame(),
       {"ResendReport"}},
      {"ReportedPreflightFailsAgain",
       kReported,
       Event(EventKind::kPreflightBlocked),
       NoWorkers(),
       {"Transition(REPORTED: preflight failed)", "SendReport"}},
      {"ReportedWorkersEndedIsNothing",
       kReported,
       Event(EventKind::kWorkersEnded),
       NoWorkers(),
       {}},
      {"ReportedRestartInPlaceDoesNotKeep",
       kReported,
       Event(EventKind::kRestart, 3, "x"),
       Keepable(),
       {"Log", Stop(), "CheckHealth(before rejoining)",
        "Transition(JOINING: rejoin)", "SendJoin"}},
  };
}

// KEEPING.
std::vector<Row> KeepingRows() {
  return {
      {"KeepingRoundReadyResumes",
       kKeeping,
       Event(EventKind::kRoundReady, 4),
       KeptAlive(),
       {"ResumeKeptWorkers",
        "Transition(RUNNING: RoundReady: kept workers "
        "told)"}},
      {"KeepingRoundReadyWithAWorkerGoneStartsNew",
       kKeeping,
       Event(EventKind::kRoundReady, 4),
       Keepable(),
       {Stop(), "Transition(JOINING: kept workers cannot go on)",
        "StartRound"}},
      {"KeepingRoundReadyOfTheSameRoundWithAWorkerGoneStartsNew",
       kKeeping,
       Event(EventKind::kRoundReady, 3),
       KeepableSameRound(),
       {Stop(), "Transition(JOINING: kept workers cannot go on)",
        "StartRound"}},
      {"KeepingKeptWorkerEndedJoinsAsANewcomer",
       kKeeping,
       Event(EventKind::kWorkersEnded, 3),
       Keepable(),
       {"Log", Stop(), "Transition(JOINING: a kept worker ended)", "SendJoin"}},
      {"KeepingFenceJoinsAgain",
       kKeeping,
       Event(EventKind::kFenceDue),
       Keepable(),
       {"FenceWorkers", "Transition(JOINING: lease fence)", kReconnectFence}},
      {"KeepingWaitingForTheNextRoundWaits",
       kKeeping,
       Event(EventKind::kWaiting, 4),
       Keepable(),
       {"LogWaiting"}},
      {"KeepingRestartKeepsNothingMore",
       kKeeping,
       Event(EventKind::kRestart, 3, "x"),
       Keepable(),
       {"Log", Stop(), "CheckHealth(before rejoining)",
        "Transition(JOINING: rejoin)", "SendJoin"}},
      {"KeepingWatchdogIsNotWatching",
       kKeeping,
       [] {
         AgentEvent e = Event(EventKind::kWatchdogHung);
         e.hung_local_ranks = {0};
         return e;
       }(),
       Keepable(),
       {}},
  };
}

// The exits, from any state.
std::vector<Row> ExitRows() {
  return {
      {"JobSucceededExitsZero",
       kReported,
       Event(EventKind::kJobSucceeded),
       NoWorkers(),
       {Stop(), "Log", Exit(kExitSuccess)}},
      {"JobFailedPrintsTheSummary",
       kRunning,
       Event(EventKind::kJobFailed),
       Running(),
       {Stop(), "PrintFailureSummary", Exit(kExitJobFailed)}},
      {"StopSignalForwardsStopsLeavesExits",
       kRunning,
       [] {
         AgentEvent e = Event(EventKind::kStopSignal);
         e.signal = platform::kSignalInterrupt;
         return e;
       }(),
       Running(),
       {"Log", absl::StrCat("ForwardSignal(", platform::kSignalInterrupt, ")"),
        Stop(platform::kSignalInterrupt),
        absl::StrCat("Leave(agent stopped by ",
                     platform::SignalName(platform::kSignalInterrupt), ")"),
        Exit(kExitSignalBase + platform::kSignalInterrupt)}},
      {"StopSignalWithoutWorkersForwardsNothing",
       kJoining,
       [] {
         AgentEvent e = Event(EventKind::kStopSignal);
         e.signal = platform::kSignalTerminate;
         return e;
       }(),
       NoWorkers(),
       {"Log", Stop(),
        absl::StrCat("Leave(agent stopped by ",
                     platform::SignalName(platform::kSignalTerminate), ")"),
        Exit(kExitSignalBase + platform::kSignalTerminate)}},
      {"StartFailedIsAConfigError",
       kJoining,
       Event(EventKind::kStartFailed, 1, "program 'x' not found"),
       NoWorkers(),
       {"Log", "Leave(cannot start the workers: program 'x' not found)",
        Exit(kExitConfigError)}},
      {"HealthCheckFailedExits",
       kJoining,
       [] {
         AgentEvent e = Event(EventKind::kHealthCheckFailed);
         e.exit_code = kExitHealthCheckFailed;
         return e;
       }(),
       NoWorkers(),
       {Exit(kExitHealthCheckFailed)}},
      {"ExcludedStopsLeavesExitsFive",
       kRunning,
       Event(EventKind::kExcluded, 3, "straggler, score 0.48"),
       Running(),
       {"Log", Stop(),
        "Leave(musterd excluded this node from job job: straggler, score "
        "0.48)",
        Exit(kExitExcluded)}},
      {"ExcludedWhileJoiningTheNextRoundExits",
       kJoining,
       Event(EventKind::kExcluded, 4, "failed 3 rounds in a row"),
       NoWorkers(),
       {"Log", Stop(),
        "Leave(musterd excluded this node from job job: failed 3 rounds in a "
        "row)",
        Exit(kExitExcluded)}},
      {"ExcludedForAnEarlierRoundIgnored",
       kRunning,
       Event(EventKind::kExcluded, 2, "straggler, score 0.48"),
       Running(),
       {"Log"}},
      {"SessionLostReconnects",
       kRunning,
       Event(EventKind::kSessionLost, 0, "stream broken"),
       Running(),
       {"Reconnect(stream broken)"}},
      {"ReconnectFailedIsUnavailable",
       kRunning,
       Event(EventKind::kReconnectFailed),
       Running(),
       {Exit(kExitUnavailable)}},
      {"ReconnectEndedByASignalStops",
       kRunning,
       Event(EventKind::kReconnectFailed),
       [] {
         AgentFacts f = Running();
         f.stop_signal = platform::kSignalTerminate;
         return f;
       }(),
       {"Log", absl::StrCat("ForwardSignal(", platform::kSignalTerminate, ")"),
        Stop(),
        absl::StrCat("Leave(agent stopped by ",
                     platform::SignalName(platform::kSignalTerminate), ")"),
        Exit(kExitSignalBase + platform::kSignalTerminate)}},
      {"SessionEndedRefusedIsAConfigError",
       kJoining,
       [] {
         AgentEvent e = Event(EventKind::kSessionEnded, 0, "refused");
         e.code = absl::StatusCode::kFailedPrecondition;
         return e;
       }(),
       NoWorkers(),
       {"Log", Exit(kExitConfigError)}},
      {"OtherMessageIsNothing",
       kRunning,
       Event(EventKind::kOtherMessage),
       Running(),
       {}},
  };
}

std::vector<Row> Rows() {
  std::vector<Row> rows;
  for (auto part :
       {&JoiningRows, &RunningRows, &ReportedRows, &KeepingRows, &ExitRows}) {
    for (Row& r : part()) rows.push_back(std::move(r));
  }
  return rows;
}

class DecideTable : public ::testing::TestWithParam<Row> {};

TEST_P(DecideTable, Actions) {
  const Row& row = GetParam();
  EXPECT_THAT(Summary(Decide(row.state, row.event, row.facts)),
              ElementsAreArray(row.want))
      << AgentStateName(row.state) << " + " << EventKindName(row.event.kind);
}

INSTANTIATE_TEST_SUITE_P(Rows, DecideTable, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return std::string(info.param.name);
                         });

// Every state, every event, every combination of the facts that matter: each
// transition Decide asks for is in the table (followed from the state the
// earlier ones of the list left), nothing comes after an exit, and a round
// starts only outside KEEPING (so the outcomes of kStartRound, swept from the
// other states, never arrive in KEEPING).
TEST(DecideSweep, EveryTransitionIsInTheTableAndExitsEndTheList) {
  constexpr EventKind kEvents[] = {
      EventKind::kWaiting,         EventKind::kRoundReady,
      EventKind::kRestart,         EventKind::kJobSucceeded,
      EventKind::kJobFailed,       EventKind::kCaptureHang,
      EventKind::kOtherMessage,    EventKind::kWorkersEnded,
      EventKind::kWatchdogHung,    EventKind::kSessionLost,
      EventKind::kSessionEnded,    EventKind::kFenceDue,
      EventKind::kStopSignal,      EventKind::kPreflightBlocked,
      EventKind::kLeaseNotHeld,    EventKind::kStartFailed,
      EventKind::kWorkersStarted,  EventKind::kHealthCheckFailed,
      EventKind::kReconnectFailed, EventKind::kExcluded};
  constexpr AgentState kStates[] = {kJoining, kRunning, kReported, kKeeping};
  int lists = 0;
  for (AgentState state : kStates) {
    for (EventKind kind : kEvents) {
      const bool start_outcome = kind == EventKind::kPreflightBlocked ||
                                 kind == EventKind::kLeaseNotHeld ||
                                 kind == EventKind::kStartFailed ||
                                 kind == EventKind::kWorkersStarted;
      if (state == kKeeping && start_outcome) continue;
      for (int bits = 0; bits < 128; ++bits) {
        AgentFacts f;
        f.in_place = bits & 1;
        f.workers_running = bits & 2;
        f.keep_workers_possible = bits & 4;
        f.kept_workers_alive = bits & 8;
        f.same_round = bits & 16;
        f.reported = bits & 32;
        f.stop_signal = (bits & 64) ? platform::kSignalTerminate : 0;
        f.round = 3;
        for (int64_t round : {2, 3, 4}) {
          AgentEvent e = Event(kind, round, "why");
          e.signal = platform::kSignalTerminate;
          e.hung_local_ranks = {1};
          e.code = absl::StatusCode::kInternal;
          AgentState at = state;
          bool exited = false;
          for (const AgentAction& a : Decide(state, e, f)) {
            ASSERT_FALSE(exited) << DescribeAction(a) << " after an exit";
            if (a.kind == ActionKind::kTransition) {
              EXPECT_TRUE(TransitionAllowed(at, a.to))
                  << AgentStateName(state) << " + " << EventKindName(kind)
                  << ": " << AgentStateName(at) << " -> "
                  << AgentStateName(a.to) << " (bits " << bits << ")";
              at = a.to;
            }
            if (a.kind == ActionKind::kStartRound) {
              EXPECT_NE(at, kKeeping) << EventKindName(kind);
            }
            exited = a.kind == ActionKind::kExit;
          }
          ++lists;
        }
      }
    }
  }
  EXPECT_EQ(lists, (4 * 20 - 4) * 128 * 3);
}

// The words of the decisions' log lines, which operators and tests read.
TEST(DecideLog, TheLinesSayWhy) {
  auto text = [](const std::vector<AgentAction>& actions) {
    for (const AgentAction& a : actions) {
      if (a.kind == ActionKind::kLog) return a.reason;
    }
    return std::string();
  };
  EXPECT_EQ(text(Decide(kRunning, Event(EventKind::kRestart, 3, "node b lost"),
                        Running())),
            "round 3 ended: node b lost; stopping workers and rejoining");
  EXPECT_EQ(text(Decide(kRunning, Event(EventKind::kWaiting, 4), Running())),
            "round 3 went on without this node; stopping its workers");
  EXPECT_EQ(
      text(Decide(kReported, Event(EventKind::kJobSucceeded), NoWorkers())),
      "job 'job' succeeded");
  EXPECT_EQ(
      text(Decide(kJoining, Event(EventKind::kLeaseNotHeld, 4), NoWorkers())),
      "round 4: this node's lease is about to end; not starting its "
      "workers");
  EXPECT_EQ(
      text(Decide(kKeeping, Event(EventKind::kWorkersEnded, 3), Keepable())),
      "a kept worker of round 3 ended while the next round formed; "
      "stopping this node's workers (new ones start in the next round)");
  EXPECT_EQ(text(Decide(kRunning,
                        Event(EventKind::kExcluded, 3, "straggler, score 0.48"),
                        Running())),
            "musterd excluded this node from job job: straggler, score 0.48");
  for (const AgentAction& a :
       Decide(kRunning, Event(EventKind::kExcluded, 3, "x"), Running())) {
    if (a.kind == ActionKind::kLog) {
      EXPECT_EQ(a.level, LogLevel::kError);
    }
  }
  EXPECT_EQ(
      text(Decide(kRunning, Event(EventKind::kExcluded, 2, "slow"), Running())),
      "Excluded for round 2 ignored: this node runs round 3 (slow)");
  for (const AgentAction& a :
       Decide(kRunning, Event(EventKind::kRestart, 3, "x"), Running())) {
    if (a.kind == ActionKind::kLog) {
      EXPECT_EQ(a.level, LogLevel::kWarning);
    }
  }
}

// A session the server ended (not UNAVAILABLE: that is a lost session, and
// the agent reconnects) ends the agent; what cannot heal by retrying is a
// configuration error.
TEST(ExitCodeForSessionEnd, RefusalsAreConfigErrors) {
  for (absl::StatusCode code :
       {absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnauthenticated,
        absl::StatusCode::kPermissionDenied,
        absl::StatusCode::kAlreadyExists}) {
    EXPECT_EQ(ExitCodeForSessionEnd(code), kExitConfigError)
        << absl::StatusCodeToString(code);
  }
  EXPECT_EQ(ExitCodeForSessionEnd(absl::StatusCode::kUnavailable),
            kExitUnavailable);
  EXPECT_EQ(ExitCodeForSessionEnd(absl::StatusCode::kCancelled),
            kExitJobFailed);
  EXPECT_EQ(ExitCodeForSessionEnd(absl::StatusCode::kInternal), kExitJobFailed);
}

// Decide is a function of its arguments: the same call, the same answer.
TEST(Decide, IsPure) {
  const AgentEvent e = Event(EventKind::kRestart, 3, "x");
  EXPECT_EQ(Decide(kRunning, e, Keepable()), Decide(kRunning, e, Keepable()));
  EXPECT_THAT(
      Summary(Decide(kRunning, Event(EventKind::kOtherMessage), Running())),
      ElementsAre());
}

}  // namespace
}  // namespace muster::agent
