// --recovery=in-place: the agent keeps its running workers across
// rounds and tells them each new round through their control channels
// (agent/src/control_channel.h); and Transition, the one place state_ changes
// (agent/src/agent_state.h has the table and the diagram).
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/src/elastic_agent_impl.h"
#include "agent/src/round_workers.h"
#include "muster/common/logging.h"

namespace muster::agent {

void ElasticAgent::Impl::Transition(AgentState to, const char* why) {
  if (!TransitionAllowed(state_, to)) {
    MUSTER_LOG(ERROR) << "internal: the agent went from "
                      << AgentStateName(state_) << " to " << AgentStateName(to)
                      << " (" << why
                      << "), a transition its table does not have; please "
                         "report this";
  } else {
    MUSTER_LOG(DEBUG) << "agent: " << AgentStateName(state_) << " -> "
                      << AgentStateName(to) << " (" << why << ")";
  }
  state_ = to;
}

bool ElasticAgent::Impl::OpenControlChannels(const RoundWorkers& round,
                                             const std::string& attempt_dir) {
  std::vector<ControlChannel> controls;
  for (const WorkerEnvParams& p : round.params) {
    absl::StatusOr<ControlChannel> c = ControlChannel::Create(p.control_dir);
    absl::Status s =
        c.ok() ? c->Write(ControlState::kRunning, p, "") : c.status();
    if (!s.ok()) {
      MUSTER_LOG(ERROR) << s.message()
                        << "; this round's workers start without a control "
                           "channel and are restarted at its end";
      return false;
    }
    controls.push_back(*std::move(c));
  }
  controls_ = std::move(controls);
  worker_params_ = round.params;
  workers_attempt_dir_ = attempt_dir;
  return true;
}

bool ElasticAgent::Impl::CanKeepWorkers() {
  if (!in_place() || group_ == nullptr || state_ != AgentState::kRunning ||
      controls_.size() != static_cast<size_t>(config_.nproc_per_node)) {
    return false;
  }
  const GroupStatus status = group_->Poll();
  if (status.state != GroupState::kRunning || !status.exits.empty())
    return false;
  const std::vector<int> pids = group_->pids();
  if (pids.size() != controls_.size()) return false;
  for (size_t i = 0; i < pids.size(); ++i) {
    const std::optional<int64_t> hello = controls_[i].HelloPid();
    if (!hello.has_value() || *hello != pids[i]) {
      MUSTER_LOG(INFO) << "worker local rank " << i << " (pid " << pids[i]
                       << ") has not opened its control channel ("
                       << (hello.has_value() ? "its hello names another pid"
                                             : "no hello")
                       << "): restarting this node's workers";
      return false;
    }
  }
  return true;
}

bool ElasticAgent::Impl::WriteChanging(const std::string& reason) {
  for (size_t i = 0; i < controls_.size(); ++i) {
    if (absl::Status s = controls_[i].Write(ControlState::kChanging,
                                            worker_params_[i], reason);
        !s.ok()) {
      MUSTER_LOG(ERROR) << s.message() << "; restarting this node's workers";
      return false;
    }
  }
  MUSTER_LOG(WARNING) << "round " << round_.round() << " ended: " << reason
                      << "; keeping this node's " << controls_.size()
                      << " workers (--recovery=in-place) and rejoining";
  return true;
}

bool ElasticAgent::Impl::KeptWorkersAlive() {
  if (group_ == nullptr) return false;
  const GroupStatus status = group_->Poll();
  return status.state == GroupState::kRunning && status.exits.empty();
}

bool ElasticAgent::Impl::ResumeKeptWorkers(const v1::RoundReady& ready) {
  std::vector<WorkerEnvParams> params;
  for (int local = 0; local < config_.nproc_per_node; ++local) {
    params.push_back(MakeWorkerParams(
        config_, ready, local, workers_attempt_dir_, endpoint_, security_));
    if (absl::Status s =
            controls_[local].Write(ControlState::kRunning, params.back(), "");
        !s.ok()) {
      MUSTER_LOG(ERROR) << s.message() << "; restarting this node's workers";
      return false;
    }
  }
  worker_params_ = std::move(params);
  last_report_.reset();
  round_ = ready;
  client_->SetRound(ready.round());
  last_waiting_joined_ = -1;
  MUSTER_LOG(INFO) << DescribeRound(config_, ready)
                   << "; the kept workers carry on (no process started)";
  // The wait for the round was no worker's fault: progress counts from now.
  std::vector<std::string> files;
  for (const WorkerEnvParams& p : worker_params_)
    files.push_back(p.progress_file);
  WatchProgress(std::move(files));
  return true;
}

}  // namespace muster::agent
