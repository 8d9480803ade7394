// ElasticAgent::Impl: the agent's state and its parts, shared by
// elastic_agent.cc (start-up, the main loop), agent_actions.cc (the actions of
// Decide, agent_decisions.h, executed), agent_session.cc (the session with the
// server: reconnects, round claims, lease fencing), in_place_recovery.cc and
// progress_watch.cc.
#ifndef MUSTER_AGENT_SRC_ELASTIC_AGENT_IMPL_H_
#define MUSTER_AGENT_SRC_ELASTIC_AGENT_IMPL_H_

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "agent/src/agent_decisions.h"
#include "agent/src/agent_health.h"
#include "agent/src/agent_inbox.h"
#include "agent/src/agent_state.h"
#include "agent/src/control_channel.h"
#include "agent/src/embedded_rendezvous.h"
#include "agent/src/failure_summary.h"
#include "agent/src/lease_fence.h"
#include "agent/src/numa_binding.h"
#include "agent/src/preflight.h"
#include "agent/src/round_workers.h"
#include "agent/src/stack_capture.h"
#include "agent/src/watchdog.h"
#include "muster/agent/elastic_agent.h"
#include "muster/agent/exit_codes.h"
#include "muster/agent/worker_env.h"
#include "muster/agent/worker_group.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/platform/env.h"
#include "muster/platform/job_keeper.h"
#include "muster/platform/signals.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/local_rendezvous.h"
#include "muster/rendezvous/server.h"
#include "nlohmann/json.hpp"

namespace muster::agent {

class ElasticAgent::Impl {
 public:
  Impl(AgentConfig config, AgentDeps deps)
      : config_(std::move(config)),
        clock_(deps.clock != nullptr ? deps.clock : Clock::Real()),
        launcher_(deps.launcher != nullptr
                      ? deps.launcher
                      : platform::ProcessLauncher::Default()),
        new_client_(std::move(deps.new_client)) {}

  int Run();
  void RequestStop(int sig) {
    stop_signal_.store(sig);
    inbox_->Wake();
  }

 private:
  // Start-up: the embedded server (when the mode wants one) and the session.
  // Each step returns an exit status, or -1 to go on.
  int Setup();
  // The health server, the embedded rendezvous server or in-process
  // rendezvous, the endpoint to join, the lease fence and the security.
  int StartRendezvous();
  // join_: this node's id, address, master port, sizes and timeouts.
  int ComposeJoin();
  // A new session with the server (not started): AgentDeps::new_client, the
  // in-process rendezvous, or gRPC.
  std::unique_ptr<rendezvous::RendezvousClient> NewClient(
      absl::Duration connect_timeout);
  // --- the decisions (agent_decisions.h), executed in agent_actions.cc
  // Gathers the facts for `event`, asks Decide and executes its actions (and
  // what a step's outcome makes Decide say next). Returns an exit status once
  // a kExit shut everything down, or -1 to carry on.
  int Dispatch(AgentEvent event);
  AgentFacts GatherFacts(const AgentEvent& event);
  // How one action went: on (exit < 0, no next event, not disproved), an
  // exit status, a step's outcome event, or a step that disproved the fact it
  // rested on.
  struct ActionOutcome {
    int exit = -1;
    std::optional<AgentEvent> next;
    bool disproved = false;
  };
  ActionOutcome Execute(const AgentAction& action, const AgentEvent& event);
  // A server message as an event (its payload: `msg`, which must outlive the
  // Dispatch).
  static AgentEvent EventOf(const v1::ServerMessage& msg);
  // RUNNING: the watchdog's verdict and the group's end; KEEPING: a kept
  // worker's end; each dispatched as an event. Returns an exit status or -1.
  // Never blocks on the workers.
  int CheckWorkers();
  // How long the main loop may wait for its inbox when nothing wakes it: the
  // monitor interval, and no later than the deadlines that are not events
  // (the lease fence of running workers, the watchdog's next check).
  absl::Duration NextWait() const;
  // The session's pump into inbox_, for client_ (just started).
  void StartPump();
  // Stops the pump, closes client_ (Leave{reason} when not empty) and lets
  // both go.
  void EndSession(absl::string_view leave_reason);
  // kStartRound: round_ = ready, the preflight, the lease, the workers.
  // Returns the outcome (kPreflightBlocked with pending_report_ made,
  // kLeaseNotHeld, kStartFailed, kWorkersStarted).
  AgentEvent StartRound(const v1::RoundReady& ready);
  // kReportOutcome: how the group ended, as pending_report_; the workers
  // still running are stopped first (and the group let go).
  void ReportOutcome(const GroupStatus& status);
  // Stops the workers of the current round, if any, and returns how they
  // ended (empty when there were none).
  GroupStatus StopWorkers(int sig);
  // Lets go of the current group (stopped or ended): its process groups are
  // no longer the job keeper's to kill.
  void ReleaseGroup();
  // --event-log-handler=console: one torchelastic event as a JSON line on
  // stderr.
  void RecordEvent(const std::string& name, nlohmann::json metadata);
  // --numa-binding: each local rank's CPUs, computed at the first round (the
  // topology does not change); empty when there is no binding.
  const std::vector<std::vector<int>>& NumaCpus();
  int Shutdown(int exit_code);
  // Every change of state_: checked against agent_state.h's table (`why` is
  // logged with a transition the table lacks, a bug).
  void Transition(AgentState to, const char* why);
  // --- --recovery=in-place (the control channel: agent/src/control_channel.h)
  bool in_place() const { return config_.recovery == Recovery::kInPlace; }
  // Creates each new worker's control directory and writes its first `round`
  // (running), before the workers start. False (logged) when one cannot be
  // written: the workers then start without a channel (restart mode's
  // behaviour for them).
  bool OpenControlChannels(const RoundWorkers& round,
                           const std::string& attempt_dir);
  // RUNNING: every worker runs and its `hello` names its pid.
  bool CanKeepWorkers();
  // KEEPING: every kept worker still runs.
  bool KeptWorkersAlive();
  // kKeepWorkers: the round ended (`reason`): `changing` to each worker.
  // False when a write failed (the restart path then).
  bool WriteChanging(const std::string& reason);
  // kResumeKeptWorkers: the next RoundReady came: `running` with its values
  // to each kept worker, no process started. False when a write failed (the
  // workers are then stopped and new ones started).
  bool ResumeKeptWorkers(const v1::RoundReady& ready);
  // Sends join_ with the claim (JoinWithClaim).
  absl::Status SendJoin();
  // --- lease fencing (agent/src/lease_fence.h) and round claims
  // Options of a session with the server, lease hooks included.
  rendezvous::GrpcClientOptions ClientOptions(absl::Duration connect_timeout);
  // join_ with the round this node's workers were last started for (a
  // restarted musterd re-adopts it; see RoundClaim in rendezvous.proto).
  v1::Join JoinWithClaim() const;
  // kFenceWorkers: the lease is about to end: stop the workers now (grace 0.2
  // lease, then SIGKILL), before musterd can give their ranks to another
  // round.
  void FenceWorkers();
  bool FenceDue() const { return group_ != nullptr && fence_->FenceDue(); }
  // Workers start only under a lease that is not about to end: one that lasts
  // lease/4 before its fence (RoundReady's lease_seq renews it), or else,
  // after a heartbeat sent at once, whatever renewal comes within 0.3 lease.
  // False when the lease is about to end (the session is as good as lost). An
  // older musterd that never renews leaves the agent unfenced, as before.
  // While the agent waits for a round (no workers) the fence is idle: it
  // fences only running workers (FenceDue), and musterd does not renew it.
  bool AwaitLease();
  bool fence_pending_ = false;  // AwaitLease failed: fence and reconnect
  // kReconnect: the session is lost (the stream broke, or the lease ended):
  // reconnects within the window (a session the server keeps ending at once
  // backs off). False when the window passed or a stop signal came.
  bool ResumeSession(const std::string& why);
  bool reconnecting_ = false;  // within ResumeSession
  // After a lost session: reconnects with backoff until `deadline`, keeping
  // the node id (and so its place in a running round). False when the window
  // passed or a stop signal came.
  bool Reconnect(absl::Time deadline);
  // Whether `ready` describes the round this agent's workers already run (or
  // ran): the same round, ranks, master and store namespace. A RoundReady
  // resent after a reconnect is.
  bool SameRound(const v1::RoundReady& ready) const;
  // Sends a report of the workers' outcome, and keeps it to send again after a
  // reconnect.
  void Report(const v1::AgentMessage& msg);
  // The report kReportOutcome or kStartRound made, for kSendReport.
  std::optional<v1::AgentMessage> pending_report_;
  // kLogWaiting: the Waiting's counts, when they changed.
  void LogWaiting(const v1::Waiting& w);
  std::string LogRunDir();
  void PrintFailureSummary(const v1::JobFailed& failed);

  absl::Status StartHealthServer();
  void PublishHealth();

  const AgentConfig config_;
  Clock* const clock_;
  platform::ProcessLauncher* const launcher_;
  const std::function<std::unique_ptr<rendezvous::RendezvousClient>(
      const rendezvous::GrpcClientOptions&)>
      new_client_;
  std::atomic<int> stop_signal_{0};
  // What the main loop waits on (agent_inbox.h); shared with the session
  // pump and the worker groups' exit hooks, which may outlive a group.
  const std::shared_ptr<AgentInbox> inbox_ = std::make_shared<AgentInbox>();
  // --health-port.
  std::unique_ptr<AgentHealth> health_;

  std::unique_ptr<rendezvous::RendezvousServer> server_;
  // --standalone: the round forms in process, with no server (see
  // UseLocalRendezvous).
  std::unique_ptr<rendezvous::LocalRendezvous> local_;
  std::unique_ptr<rendezvous::RendezvousClient> client_;
  // Reads client_'s messages into inbox_; goes before client_ does.
  std::unique_ptr<SessionPump> pump_;
  v1::Join join_;
  std::string endpoint_;
  // config_.security, without TLS when this agent's own embedded server
  // (plaintext) is the endpoint.
  store::ClientSecurity security_;

  AgentState state_ = AgentState::kJoining;
  v1::RoundReady round_;
  std::unique_ptr<WorkerGroup> group_;
  // --worker-timeout: watches the current group's progress files.
  std::unique_ptr<Watchdog> watchdog_;
  // ... and tells musterd, in the heartbeats (shared with the session's
  // heartbeat thread).
  const std::shared_ptr<NodeProgress> progress_ =
      std::make_shared<NodeProgress>(clock_);
  // progress_watch.cc: with --worker-timeout, watches the workers of round_
  // (their progress files by local rank) from now on: the watchdog (a grace
  // longer when musterd watches too) and the heartbeats' progress_age_ms.
  void WatchProgress(std::vector<std::string> files);
  // The watchdog's check, at most every min(monitor interval, timeout/10):
  // the local ranks of the hung workers (its verdict).
  std::vector<int> CheckWatchdog();
  // kKillHung: the hang report, then the hung workers are killed.
  void KillHung(const std::vector<int>& hung);
  // kCaptureHang: musterd saw no progress from any rank (`reason`): the hang
  // report, then every local worker is killed as hung (the round ends through
  // WorkersFailed).
  void CaptureHang(const std::string& reason);
  // `muster stacks` and the hang report: the running workers' stacks. Shared
  // with the session's capture thread.
  const std::shared_ptr<StackCapturer> stacks_ =
      std::make_shared<StackCapturer>();
  // The hang report (the watchdog's or musterd's), for the failure summary.
  std::string hang_report_;
  // --health-check before a join (health_check.cc): -1 when it passed (or
  // there is none), else the exit status (kExitHealthCheckFailed), after
  // printing the check's output. `when`: "before joining", ...
  int CheckNodeHealth(const char* when);
  absl::Time next_watchdog_check_;
  int attempt_ = -1;
  std::string run_dir_;
  bool temp_run_dir_ = false;
  int last_waiting_joined_ = -1;
  // A server that accepts each session and then ends it UNAVAILABLE at once
  // (it refuses a rerun of a job whose previous agents are still leaving) is
  // retried for reconnect_timeout in all, with backoff, not forever: these
  // are the start of the current run of such quick endings (InfiniteFuture
  // when there is none), the current backoff, and when the current session
  // started.
  absl::Time unavailable_since_ = absl::InfiniteFuture();
  absl::Duration unavailable_backoff_;
  absl::Time session_started_;
  bool session_got_message_ = false;
  // The last WorkersSucceeded/WorkersFailed sent, for the current round.
  std::optional<v1::AgentMessage> last_report_;
  std::optional<std::vector<std::vector<int>>> numa_cpus_;
  // --recovery=in-place: the running workers' control channels and round
  // values (by local rank), and the attempt directory they were started in.
  std::vector<ControlChannel> controls_;
  std::vector<WorkerEnvParams> worker_params_;
  std::string workers_attempt_dir_;
  std::unique_ptr<LeaseFence> fence_;
  // Several musterd replicas (--rdzv-endpoint=H1:P1,H2:P2): what the sessions
  // learn about which one leads, kept across reconnects.
  bool several_replicas_ = false;
  const std::shared_ptr<rendezvous::ReplicaMemory> replicas_ =
      std::make_shared<rendezvous::ReplicaMemory>();
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_ELASTIC_AGENT_IMPL_H_
