// The executor of the agent's decisions (agent/src/agent_decisions.h): what
// happens becomes an AgentEvent, Dispatch gathers the facts and asks Decide,
// and Execute carries out each action. The steps (a new round's start, a
// report of how the workers ended) live here too.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/src/elastic_agent_impl.h"
#include "agent/src/preflight.h"
#include "agent/src/round_workers.h"
#include "muster/common/logging.h"
#include "muster/platform/job_keeper.h"

namespace muster::agent {

AgentEvent ElasticAgent::Impl::EventOf(const v1::ServerMessage& msg) {
  AgentEvent e;
  e.message = &msg;
  switch (msg.kind_case()) {
    case v1::ServerMessage::kWaiting:
      e.kind = EventKind::kWaiting;
      e.round = msg.waiting().round();
      break;
    case v1::ServerMessage::kRoundReady:
      e.kind = EventKind::kRoundReady;
      e.round = msg.round_ready().round();
      break;
    case v1::ServerMessage::kRestart:
      e.kind = EventKind::kRestart;
      e.round = msg.restart().round();
      e.reason = msg.restart().reason();
      break;
    case v1::ServerMessage::kJobSucceeded:
      e.kind = EventKind::kJobSucceeded;
      break;
    case v1::ServerMessage::kJobFailed:
      e.kind = EventKind::kJobFailed;
      break;
    case v1::ServerMessage::kCaptureHang:
      e.kind = EventKind::kCaptureHang;
      e.round = msg.capture_hang().round();
      e.reason = msg.capture_hang().reason();
      break;
    case v1::ServerMessage::kExcluded:
      e.kind = EventKind::kExcluded;
      e.round = msg.excluded().round();
      e.reason = msg.excluded().reason();
      break;
    case v1::ServerMessage::kCaptureStacks:  // taken by the client's reader
    case v1::ServerMessage::kLeaseRenewed:   // taken by the client's reader
    case v1::ServerMessage::KIND_NOT_SET:
      e.kind = EventKind::kOtherMessage;
      break;
  }
  return e;
}

AgentFacts ElasticAgent::Impl::GatherFacts(const AgentEvent& event) {
  AgentFacts f;
  f.in_place = in_place();
  f.workers_running = group_ != nullptr;
  f.round = round_.round();
  f.reported = last_report_.has_value();
  f.stop_signal = stop_signal_.load();
  f.reconnecting = reconnecting_;
  f.job_id = config_.run_id;
  // Only where a decision reads them: CanKeepWorkers reads the workers'
  // `hello` files and says in the log why it cannot keep them.
  const bool may_keep =
      f.in_place && state_ == AgentState::kRunning && f.workers_running;
  switch (event.kind) {
    case EventKind::kRoundReady:
      f.same_round = attempt_ >= 0 && SameRound(event.message->round_ready());
      if (state_ == AgentState::kKeeping)
        f.kept_workers_alive = KeptWorkersAlive();
      break;
    case EventKind::kRestart:
      if (may_keep) f.keep_workers_possible = CanKeepWorkers();
      break;
    case EventKind::kWaiting:
      if (may_keep && event.round > f.round)
        f.keep_workers_possible = CanKeepWorkers();
      break;
    default:
      break;
  }
  return f;
}

int ElasticAgent::Impl::Dispatch(AgentEvent event) {
  AgentFacts facts = GatherFacts(event);
  // Each turn is one Decide; a step that ends otherwise than planned asks
  // again. A handful of turns is the most a chain takes (a failed resume, a
  // start, its outcome); more would be a loop, a bug.
  constexpr int kMaxTurns = 8;
  for (int turn = 0; turn < kMaxTurns; ++turn) {
    const std::vector<AgentAction> actions = Decide(state_, event, facts);
    bool again = false;
    for (const AgentAction& action : actions) {
      MUSTER_LOG(DEBUG) << "agent: " << EventKindName(event.kind) << " in "
                        << AgentStateName(state_) << ": "
                        << DescribeAction(action);
      ActionOutcome out = Execute(action, event);
      if (out.exit >= 0) return out.exit;
      if (out.disproved) {
        if (action.kind == ActionKind::kKeepWorkers)
          facts.keep_workers_possible = false;
        if (action.kind == ActionKind::kResumeKeptWorkers)
          facts.kept_workers_alive = false;
        again = true;
        break;
      }
      if (out.next.has_value()) {
        event = *std::move(out.next);
        facts = GatherFacts(event);
        again = true;
        break;
      }
    }
    if (!again) return -1;
  }
  MUSTER_LOG(ERROR) << "internal: the agent's decisions for "
                    << EventKindName(event.kind)
                    << " did not settle; please report this";
  return -1;
}

ElasticAgent::Impl::ActionOutcome ElasticAgent::Impl::Execute(
    const AgentAction& a, const AgentEvent& event) {
  ActionOutcome out;
  switch (a.kind) {
    case ActionKind::kTransition:
      Transition(a.to, a.reason.c_str());
      break;
    case ActionKind::kLog:
      MUSTER_LOG_AT(a.level) << a.reason;
      break;
    case ActionKind::kForwardSignal:
      if (group_ != nullptr) group_->Signal(a.signal);
      break;
    case ActionKind::kStopWorkers:
      StopWorkers(a.signal);
      break;
    case ActionKind::kFenceWorkers:
      FenceWorkers();
      break;
    case ActionKind::kReportOutcome:
      ReportOutcome(*event.status);
      break;
    case ActionKind::kSendReport:
      if (pending_report_.has_value())
        Report(*std::exchange(pending_report_, {}));
      break;
    case ActionKind::kResendReport:
      if (last_report_.has_value()) Report(*last_report_);
      break;
    case ActionKind::kSendJoin:
      if (absl::Status s = SendJoin(); !s.ok()) {
        MUSTER_LOG(ERROR) << "cannot rejoin: " << s.message();
      }
      break;
    case ActionKind::kKeepWorkers:
      out.disproved = !WriteChanging(a.reason);
      break;
    case ActionKind::kResumeKeptWorkers:
      out.disproved = !ResumeKeptWorkers(event.message->round_ready());
      break;
    case ActionKind::kStartRound:
      out.next = StartRound(event.message->round_ready());
      break;
    case ActionKind::kLogWaiting:
      LogWaiting(event.message->waiting());
      break;
    case ActionKind::kCaptureHang:
      CaptureHang(a.reason);
      break;
    case ActionKind::kKillHung:
      KillHung(a.hung_local_ranks);
      break;
    case ActionKind::kCheckHealth:
      if (int exit = CheckNodeHealth(a.reason.c_str()); exit >= 0) {
        AgentEvent failed;
        failed.kind = EventKind::kHealthCheckFailed;
        failed.exit_code = exit;
        out.next = std::move(failed);
      }
      break;
    case ActionKind::kReconnect:
      if (!ResumeSession(a.reason)) {
        AgentEvent failed;
        failed.kind = EventKind::kReconnectFailed;
        out.next = std::move(failed);
      }
      break;
    case ActionKind::kFencePending:
      fence_pending_ = true;
      break;
    case ActionKind::kPrintFailureSummary:
      PrintFailureSummary(event.message->job_failed());
      break;
    case ActionKind::kLeave:
      if (client_ != nullptr) client_->Close(a.reason);
      break;
    case ActionKind::kExit:
      out.exit = Shutdown(a.exit_code);
      break;
  }
  return out;
}

int ElasticAgent::Impl::CheckWorkers() {
  if (group_ == nullptr) return -1;
  AgentEvent event;
  event.round = round_.round();
  if (state_ == AgentState::kKeeping) {
    if (KeptWorkersAlive()) return -1;
    event.kind = EventKind::kWorkersEnded;
    return Dispatch(std::move(event));
  }
  if (state_ != AgentState::kRunning) return -1;
  if (std::vector<int> hung = CheckWatchdog(); !hung.empty()) {
    AgentEvent verdict;
    verdict.kind = EventKind::kWatchdogHung;
    verdict.hung_local_ranks = std::move(hung);
    if (int rc = Dispatch(std::move(verdict)); rc >= 0) return rc;
    if (group_ == nullptr) return -1;
  }
  const GroupStatus status = group_->Poll();
  if (status.state == GroupState::kRunning) return -1;
  event.kind = EventKind::kWorkersEnded;
  event.succeeded = status.state == GroupState::kSucceeded;
  event.status = &status;
  return Dispatch(std::move(event));
}

AgentEvent ElasticAgent::Impl::StartRound(const v1::RoundReady& ready) {
  AgentEvent outcome;
  outcome.round = ready.round();
  last_report_.reset();
  round_ = ready;
  if (config_.preflight && ready.group_world_size() > 1) {
    std::vector<v1::Peer> peers = ChoosePreflightPeers(ready);
    if (auto blocked = RunPreflight(ready, peers, config_.preflight_timeout)) {
      MUSTER_LOG(ERROR) << "preflight: cannot reach node "
                        << blocked->peer_hostname() << " ("
                        << blocked->peer_address() << ") on TCP port "
                        << blocked->port() << ": " << blocked->outcome() << ". "
                        << blocked->explanation();
      v1::AgentMessage msg;
      *msg.mutable_preflight_failed() = *std::move(blocked);
      client_->SetRound(ready.round());
      pending_report_ = std::move(msg);
      outcome.kind = EventKind::kPreflightBlocked;
      return outcome;
    }
    MUSTER_LOG(DEBUG) << "preflight: " << peers.size() << " peers reachable";
  }
  client_->SetRound(ready.round());
  ++attempt_;
  last_waiting_joined_ = -1;
  const std::string attempt_dir =
      absl::StrCat(LogRunDir(), "/attempt_", attempt_);
  std::map<std::string, std::string> base = CurrentEnvironment();
  // Marks every process of the job for the keeper (job_keeper.h), also the
  // ones that leave their worker's process group.
  if (!platform::JobKeeperTag().empty()) {
    base[platform::kJobTagVariable] = platform::JobKeeperTag();
  }
  RoundWorkers round = MakeRoundWorkers(config_, ready, attempt_dir, endpoint_,
                                        security_, base, NumaCpus());
  controls_.clear();
  worker_params_.clear();
  if (in_place() && !OpenControlChannels(round, attempt_dir)) {
    // No channel: these workers are restarted at every round's end.
    for (WorkerSpec& w : round.workers) {
      w.env.erase("MUSTER_RECOVERY");
      w.env.erase("MUSTER_CONTROL_DIR");
    }
  }

  MUSTER_LOG(INFO) << DescribeRound(config_, ready);
  if (!AwaitLease()) {  // lease fencing
    outcome.kind = EventKind::kLeaseNotHeld;
    return outcome;
  }
  // A worker's end wakes the main loop (which then looks at the group).
  auto group = WorkerGroup::Start(launcher_, std::move(round.workers),
                                  std::move(round.output),
                                  [inbox = inbox_] { inbox->Wake(); });
  if (!group.ok()) {
    outcome.kind = EventKind::kStartFailed;
    outcome.reason = std::string(group.status().message());
    return outcome;
  }
  group_ = *std::move(group);
  for (int pid : group_->pids()) platform::KeeperWatchGroup(pid);
  stacks_->SetWorkers(
      CaptureTargets(group_->pids(), ready.rank_offset(), round.stacks_files),
      join_.hostname(), join_.node_id());
  WatchProgress(std::move(round.progress_files));
  outcome.kind = EventKind::kWorkersStarted;
  return outcome;
}

void ElasticAgent::Impl::ReportOutcome(const GroupStatus& status) {
  v1::AgentMessage msg;
  auto worker_event = [&](const WorkerExit& e, const char* state) {
    RecordEvent(absl::StrCat("torchelastic.worker.status.", state),
                {{"run_id", config_.run_id},
                 {"global_rank", e.global_rank},
                 {"local_rank", e.local_rank},
                 {"group_rank", round_.group_rank()},
                 {"worker_id", absl::StrCat(e.pid)},
                 {"role", config_.role},
                 {"hostname", join_.hostname()},
                 {"state", state},
                 {"restart_count", round_.restart_count()},
                 {"exit_code", e.exit_code},
                 {"signal", e.signal},
                 {"raw_error", e.error_message}});
  };
  if (status.state == GroupState::kSucceeded) {
    msg.mutable_workers_succeeded()->set_round(round_.round());
    for (const WorkerExit& e : status.exits) worker_event(e, "SUCCEEDED");
    ReleaseGroup();
    MUSTER_LOG(INFO) << "round " << round_.round() << ": all "
                     << config_.nproc_per_node
                     << " workers of this node succeeded";
    pending_report_ = std::move(msg);
    return;
  }
  // Report the workers that failed on their own, not the ones this agent then
  // stops.
  std::vector<WorkerExit> failed;
  for (const WorkerExit& e : status.exits) {
    if (!e.succeeded()) failed.push_back(e);
  }
  // Kept workers have the ranks of the round they are in now, not those they
  // were started with.
  for (WorkerExit& e : failed)
    e.global_rank = round_.rank_offset() + e.local_rank;
  const GroupStatus stopped = StopWorkers(platform::kSignalTerminate);
  // The output is drained now: the last stderr line of each failed worker is
  // complete, and stands in for the error file it did not write
  // ("ModuleNotFoundError: No module named 'torch'").
  for (WorkerExit& e : failed) {
    for (const WorkerExit& s : stopped.exits) {
      if (s.local_rank == e.local_rank) e.last_stderr_line = s.last_stderr_line;
    }
    if (e.error_message.empty() && !e.last_stderr_line.empty()) {
      e.error_message =
          absl::StrCat(e.last_stderr_line, " (its last line on stderr)");
    }
    worker_event(e, "FAILED");
  }
  auto* report = msg.mutable_workers_failed();
  report->set_round(round_.round());
  for (const WorkerExit& e : failed) {
    v1::WorkerFailure* f = report->add_failures();
    f->set_node_id(join_.node_id());
    f->set_hostname(join_.hostname());
    f->set_local_rank(e.local_rank);
    f->set_global_rank(e.global_rank);
    f->set_pid(e.pid);
    f->set_exit_code(e.exit_code);
    f->set_signal(e.signal);
    f->set_error_message(e.error_message);
    f->set_traceback(e.traceback);
    f->set_timestamp_unix_ms(absl::ToUnixMillis(e.end_time));
    MUSTER_LOG(ERROR) << "worker rank " << e.global_rank << " (local rank "
                      << e.local_rank << ", pid " << e.pid << ") "
                      << DescribeExit(e.exit_code, e.signal)
                      << (e.error_message.empty() ? "" : ": ")
                      << e.error_message;
  }
  pending_report_ = std::move(msg);
}

void ElasticAgent::Impl::Report(const v1::AgentMessage& msg) {
  last_report_ = msg;
  if (absl::Status s = client_->Send(msg); !s.ok()) {
    // The reader sees the broken stream too and reconnects; the report is sent
    // again then.
    MUSTER_LOG(WARNING) << "cannot report to the rendezvous server: "
                        << s.message();
  }
}

bool ElasticAgent::Impl::SameRound(const v1::RoundReady& ready) const {
  return ready.round() == round_.round() &&
         ready.group_rank() == round_.group_rank() &&
         ready.rank_offset() == round_.rank_offset() &&
         ready.world_size() == round_.world_size() &&
         ready.master_addr() == round_.master_addr() &&
         ready.master_port() == round_.master_port() &&
         ready.store_prefix() == round_.store_prefix();
}

void ElasticAgent::Impl::LogWaiting(const v1::Waiting& w) {
  if (w.joined() == last_waiting_joined_) return;
  last_waiting_joined_ = w.joined();
  std::string wanted = absl::StrCat(w.min_nodes());
  if (w.max_nodes() > w.min_nodes())
    absl::StrAppend(&wanted, " (up to ", w.max_nodes(), ")");
  // A deadline of 0 means no deadline: a spare waiting for a place in the
  // next round.
  std::string until =
      w.deadline_unix_ms() == 0
          ? std::string("as a spare for the next round")
          : absl::StrCat("giving up at ", FormatTime(w.deadline_unix_ms()));
  MUSTER_LOG(INFO) << "waiting for nodes: " << w.joined() << " joined, need "
                   << wanted << "; " << until;
}

}  // namespace muster::agent
