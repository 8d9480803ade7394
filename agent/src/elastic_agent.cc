#include "muster/agent/elastic_agent.h"

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
#include "agent/src/agent_health.h"
#include "agent/src/elastic_agent_impl.h"
#include "agent/src/embedded_rendezvous.h"
#include "agent/src/failure_summary.h"
#include "agent/src/lease_fence.h"
#include "agent/src/numa_binding.h"
#include "agent/src/preflight.h"
#include "agent/src/round_workers.h"
#include "agent/src/watchdog.h"
#include "muster/agent/exit_codes.h"
#include "muster/agent/worker_env.h"
#include "muster/agent/worker_group.h"
#include "muster/common/ids.h"
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
namespace {

std::string RandomSuffix() {
  std::random_device rd;
  return absl::StrFormat("%08x", rd());
}

using platform::kSignalTerminate;
using platform::SignalName;

}  // namespace

ElasticAgent::ElasticAgent(AgentConfig config)
    : ElasticAgent(std::move(config), AgentDeps{}) {}
ElasticAgent::ElasticAgent(AgentConfig config, AgentDeps deps)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(deps))) {}
ElasticAgent::~ElasticAgent() = default;
int ElasticAgent::Run() { return impl_->Run(); }
void ElasticAgent::RequestStop(int signal) { impl_->RequestStop(signal); }

absl::Status ElasticAgent::Impl::StartHealthServer() {
  if (config_.health_port < 0) return absl::OkStatus();
  auto health = AgentHealth::Start(config_.health_port, config_.run_id);
  if (!health.ok()) return health.status();
  health_ = *std::move(health);
  MUSTER_LOG(INFO) << "serving /healthz, /readyz, /metrics on port "
                   << health_->port();
  return absl::OkStatus();
}

void ElasticAgent::Impl::PublishHealth() {
  if (health_ == nullptr) return;
  AgentHealth::Snapshot h;
  h.state = AgentStateName(state_);
  h.round = attempt_ >= 0 ? round_.round() : 0;
  h.restart_count = round_.restart_count();
  h.group_rank = attempt_ >= 0 ? round_.group_rank() : -1;
  h.world_size = round_.world_size();
  h.workers_running = group_ != nullptr && (state_ == AgentState::kRunning ||
                                            state_ == AgentState::kKeeping)
                          ? config_.nproc_per_node
                          : 0;
  health_->Publish(h);
}

int ElasticAgent::Impl::Setup() {
  if (int exit = StartRendezvous(); exit >= 0) return exit;
  if (int exit = ComposeJoin(); exit >= 0) return exit;
  if (int exit = CheckNodeHealth("before joining"); exit >= 0) return exit;
  client_ = NewClient(config_.connect_timeout);
  if (absl::Status s = client_->Start(JoinWithClaim()); !s.ok()) {
    MUSTER_LOG(ERROR) << s.message();
    if (config_.mode == RendezvousMode::kStatic && server_ == nullptr) {
      // torchrun's static rendezvous needs one port on node rank 0
      // (--master-port, its TCPStore); muster's needs two, and the second
      // is the one people forget to open.
      MUSTER_LOG(ERROR)
          << "static rendezvous: node rank 0 serves muster's rendezvous on "
          << endpoint_
          << ", a second port besides --master-port=" << config_.master_port
          << " (the workers' store); both must be open from every node to "
             "node rank 0. Move the rendezvous port with "
             "--rdzv-endpoint=:PORT on every node; `muster doctor "
          << endpoint_ << "` names what blocks it";
    }
    return kExitUnavailable;
  }
  session_started_ = clock_->Now();
  MUSTER_LOG(INFO) << "joined job '" << config_.run_id << "' at "
                   << (local_ != nullptr ? "the in-process rendezvous"
                                         : endpoint_)
                   << " as node " << join_.node_id() << " ("
                   << config_.nproc_per_node << " workers, nnodes "
                   << config_.min_nodes << ":" << config_.max_nodes << ")";
  return -1;
}

int ElasticAgent::Impl::StartRendezvous() {
  if (absl::Status s = StartHealthServer(); !s.ok()) {
    MUSTER_LOG(ERROR) << "--health-port: " << s.message();
    return kExitConfigError;
  }
  if (absl::Status s = StartEmbeddedRendezvous(config_, &server_, &local_);
      !s.ok()) {
    MUSTER_LOG(ERROR) << "cannot start the rendezvous server: " << s.message();
    if (config_.mode != RendezvousMode::kStandalone &&
        s.code() != absl::StatusCode::kInvalidArgument) {
      MUSTER_LOG(ERROR) << "this node serves the job's rendezvous on "
                        << config_.embed_listen
                        << ": free that port, or move it with "
                           "--rdzv-endpoint=HOST:PORT on every node";
    }
    return s.code() == absl::StatusCode::kInvalidArgument ||
                   s.code() == absl::StatusCode::kUnavailable
               ? kExitConfigError
               : kExitJobFailed;
  }
  endpoint_ = config_.rdzv_endpoint;
  if (auto hp = ParseHostPort(endpoint_, 29400, /*allow_zero_port=*/true);
      server_ != nullptr && hp.ok() && hp->port == 0) {
    // --rdzv-endpoint=HOST:0: the embedded server took a free port.
    hp->port = server_->port();
    endpoint_ = hp->ToString();
    MUSTER_LOG(INFO) << "rendezvous server on " << endpoint_
                     << " (a free port, for --rdzv-endpoint="
                     << config_.rdzv_endpoint << ")";
  }
  if (local_ != nullptr) {
    endpoint_ = local_->store_endpoint();
  } else if (config_.mode == RendezvousMode::kStandalone || endpoint_.empty()) {
    endpoint_ = absl::StrCat("127.0.0.1:", server_ ? server_->port() : 29400);
  }
  security_ = config_.security;
  // musterd replicas: a list, or a name with several addresses.
  several_replicas_ =
      local_ == nullptr && server_ == nullptr &&
      (endpoint_.find(',') != std::string::npos ||
       (config_.replicated_lease_default &&
        rendezvous::CountReplicas(endpoint_, security_.tls()) > 1));
  absl::Duration lease = config_.lease_timeout;
  if (several_replicas_ && config_.replicated_lease_default &&
      lease < rendezvous::kDefaultReplicatedLease) {
    // As for a list (cli/launch_resolve.cc): the fence must outlast a
    // leader's replacement (muster/rendezvous/defaults.h).
    lease = rendezvous::kDefaultReplicatedLease;
    MUSTER_LOG(INFO) << endpoint_ << " names several musterd replicas: lease "
                     << absl::FormatDuration(lease)
                     << " (give --rdzv-conf=lease_timeout=... to choose)";
  }
  fence_ = std::make_unique<LeaseFence>(lease, clock_);
  if (server_ != nullptr && security_.tls()) {
    // The embedded server speaks plaintext (TLS is musterd's: --tls-cert).
    MUSTER_LOG(WARNING)
        << "this agent hosts the rendezvous server itself, without TLS: "
           "tls_ca/tls_cert/tls_key are not used (run a musterd with "
           "--tls-cert/--tls-key for TLS)";
    security_.tls_ca.clear();
    security_.tls_cert.clear();
    security_.tls_key.clear();
  }
  return -1;
}

int ElasticAgent::Impl::ComposeJoin() {
  const std::string hostname = LocalHostname();
  std::string advertised = config_.local_addr;
  if (advertised.empty()) {
    if (config_.mode == RendezvousMode::kStandalone) {
      advertised = "127.0.0.1";
    } else if (config_.mode == RendezvousMode::kStatic &&
               config_.node_rank == 0) {
      // Static mode: the workers' MASTER_ADDR is --master-addr, and node rank 0
      // is the master.
      advertised = config_.master_addr;
    } else {
      advertised = DefaultAdvertisedAddress();
    }
  }
  int master_port = config_.master_port;
  if (master_port <= 0) {
    auto port = PickFreePort();
    if (!port.ok()) {
      MUSTER_LOG(ERROR) << "cannot reserve a MASTER_PORT: "
                        << port.status().message();
      return kExitJobFailed;
    }
    master_port = *port;
  }

  join_.set_job_id(config_.run_id);
  join_.set_node_id(NodeIdOf(
      hostname,
      absl::StrCat(platform::ProcessId(), "-", RandomSuffix().substr(0, 4))));
  // The server's id grammar (muster/common/ids.h), checked before connecting:
  // an AgentConfig built in code has not been through the flag parser.
  for (absl::Status s :
       {ValidateId("--rdzv-id", join_.job_id(), "use e.g. --rdzv-id=job-42"),
        ValidateId("node id", join_.node_id(), "report this as a bug")}) {
    if (!s.ok()) {
      MUSTER_LOG(ERROR) << s.message();
      return kExitConfigError;
    }
  }
  join_.set_hostname(hostname);
  join_.set_advertised_addr(advertised);
  join_.set_local_world_size(config_.nproc_per_node);
  join_.set_min_nodes(config_.min_nodes);
  join_.set_max_nodes(config_.max_nodes);
  join_.set_node_rank_hint(config_.node_rank);
  join_.set_max_restarts(config_.max_restarts);
  join_.set_master_port(master_port);
  join_.set_join_timeout_ms(absl::ToInt64Milliseconds(config_.join_timeout));
  join_.set_last_call_timeout_ms(
      absl::ToInt64Milliseconds(config_.last_call_timeout));
  join_.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(config_.heartbeat_interval));
  join_.set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(
      config_.heartbeat_interval * config_.heartbeat_max_missed));
  join_.set_role(config_.role);
  // This agent's node session secret, for its whole life: only it can speak
  // for this node id again after a reconnect.
  join_.set_session_secret(rendezvous::NewRandomSecret());
  join_.set_lease_timeout_ms(absl::ToInt64Milliseconds(fence_->lease()));
  // RoundReady's lease_seq renews the lease (the client applies it), so
  // musterd need not renew it while this agent waits without workers.
  join_.set_lease_from_round_ready(true);
  // musterd's progress watch (docs/architecture.md, "Hang detection"); a
  // standalone node's own watchdog sees every rank already.
  if (local_ == nullptr) {
    join_.set_worker_timeout_ms(
        absl::ToInt64Milliseconds(config_.worker_timeout));
  }
  return -1;
}

std::string ElasticAgent::Impl::LogRunDir() {
  if (run_dir_.empty()) run_dir_ = MakeRunDir(config_, &temp_run_dir_);
  return run_dir_;
}

const std::vector<std::vector<int>>& ElasticAgent::Impl::NumaCpus() {
  if (numa_cpus_.has_value()) return *numa_cpus_;
  numa_cpus_.emplace();
  if (config_.numa_binding.empty()) return *numa_cpus_;
  auto binding =
      ComputeNumaBinding(config_.numa_binding, config_.nproc_per_node,
                         ReadNumaTopology("", CurrentEnvironment()));
  if (!binding.ok()) {
    // As torchrun, a binding that cannot be made costs performance, not the
    // job: say why once and run unbound.
    MUSTER_LOG(WARNING) << binding.status().message();
    return *numa_cpus_;
  }
  *numa_cpus_ = *std::move(binding);
  for (size_t k = 0; k < numa_cpus_->size(); ++k) {
    MUSTER_LOG(INFO) << "--numa-binding=" << config_.numa_binding
                     << ": local rank " << k << " on CPUs "
                     << FormatCpuList((*numa_cpus_)[k]);
  }
  return *numa_cpus_;
}

void ElasticAgent::Impl::RecordEvent(const std::string& name,
                                     nlohmann::json metadata) {
  if (config_.event_log_handler != "console") return;
  // torchelastic's Event: name, source, timestamp (ms), metadata.
  nlohmann::json event = {{"name", name},
                          {"source", "AGENT"},
                          {"timestamp", absl::ToUnixMillis(clock_->Now())},
                          {"metadata", std::move(metadata)}};
  std::string line =
      event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void ElasticAgent::Impl::ReleaseGroup() {
  if (group_ == nullptr) return;
  for (int pid : group_->pids()) platform::KeeperForgetGroup(pid);
  stacks_->Clear();
  progress_->Stop();
  watchdog_.reset();
  group_.reset();
  controls_.clear();
  worker_params_.clear();
}

int ElasticAgent::Impl::OnRoundReady(const v1::RoundReady& ready) {
  // --recovery=in-place: the kept workers are told the new round; none start.
  if (state_ == AgentState::kKeeping && ResumeKeptWorkers(ready)) return -1;
  if (attempt_ >= 0 && SameRound(ready) &&
      (group_ != nullptr || state_ == AgentState::kReported)) {
    // The same round again after a reconnect: the workers carry on, and an
    // outcome this agent reported while the server was away is reported again.
    if (state_ == AgentState::kReported && last_report_.has_value())
      Report(*last_report_);
    if (state_ == AgentState::kJoining)
      Transition(AgentState::kRunning, "RoundReady resent after a reconnect");
    return -1;
  }
  // Workers of an earlier round still running (the session was lost and the
  // round moved on without this node) are stopped before the new round's start.
  StopWorkers(kSignalTerminate);
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
      Transition(AgentState::kReported, "preflight failed");
      Report(msg);
      return -1;
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
    MUSTER_LOG(WARNING) << "round " << ready.round()
                        << ": this node's lease is about to end; not starting "
                           "its workers";
    fence_pending_ = true;
    return -1;
  }
  auto group = WorkerGroup::Start(launcher_, std::move(round.workers),
                                  std::move(round.output));
  if (!group.ok()) {
    // The program cannot run here (not found, not executable): no restart can
    // mend that.
    MUSTER_LOG(ERROR) << group.status().message();
    client_->Close("cannot start the workers: " +
                   std::string(group.status().message()));
    return kExitConfigError;
  }
  group_ = *std::move(group);
  for (int pid : group_->pids()) platform::KeeperWatchGroup(pid);
  stacks_->SetWorkers(
      CaptureTargets(group_->pids(), ready.rank_offset(), round.stacks_files),
      join_.hostname(), join_.node_id());
  Transition(AgentState::kRunning, "RoundReady: workers started");
  WatchProgress(std::move(round.progress_files));
  return -1;
}

GroupStatus ElasticAgent::Impl::StopWorkers(int sig) {
  if (group_ == nullptr) return GroupStatus{};
  GroupStatus status = group_->Stop(sig, config_.stop_grace);
  ReleaseGroup();
  return status;
}

void ElasticAgent::Impl::OnRestart(const v1::Restart& restart) {
  if (KeepWorkers(restart.reason())) return;  // --recovery=in-place
  MUSTER_LOG(WARNING) << "round " << restart.round()
                      << " ended: " << restart.reason()
                      << "; stopping workers and rejoining";
  StopWorkers(kSignalTerminate);
  if ((health_exit_ = CheckNodeHealth("before rejoining")) >= 0) return;
  if (absl::Status s = Rejoin(); !s.ok()) {
    MUSTER_LOG(ERROR) << "cannot rejoin: " << s.message();
  }
}

void ElasticAgent::Impl::CheckWorkers() {
  if (state_ == AgentState::kKeeping) {
    CheckKeptWorkers();
    return;
  }
  if (state_ != AgentState::kRunning || group_ == nullptr) return;
  CheckWatchdog();
  GroupStatus status = group_->Wait(absl::Milliseconds(10));
  if (status.state == GroupState::kRunning) return;
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
  } else {
    // Report the workers that failed on their own, not the ones this agent then
    // stops.
    std::vector<WorkerExit> failed;
    for (const WorkerExit& e : status.exits) {
      if (!e.succeeded()) failed.push_back(e);
    }
    // Kept workers have the ranks of the round they are in now, not those
    // they were started with.
    for (WorkerExit& e : failed)
      e.global_rank = round_.rank_offset() + e.local_rank;
    const GroupStatus stopped = StopWorkers(kSignalTerminate);
    // The output is drained now: the last stderr line of each failed worker is
    // complete, and stands in for the error file it did not write
    // ("ModuleNotFoundError: No module named 'torch'").
    for (WorkerExit& e : failed) {
      for (const WorkerExit& s : stopped.exits) {
        if (s.local_rank == e.local_rank)
          e.last_stderr_line = s.last_stderr_line;
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
  }
  Transition(AgentState::kReported, "workers ended");
  Report(msg);
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

void ElasticAgent::Impl::PrintFailureSummary(const v1::JobFailed& failed) {
  const std::string out = FormatFailureSummary(
      failed, {config_.run_id, config_.python_interpreter,
               config_.python_source, run_dir_, hang_report_});
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

int ElasticAgent::Impl::Handle(const v1::ServerMessage& msg) {
  switch (msg.kind_case()) {
    case v1::ServerMessage::kWaiting: {
      const v1::Waiting& w = msg.waiting();
      // After a reconnect, workers of the last round may still run here. When
      // the server already forms a later round (this node was lost and the
      // others went on), theirs is over. Otherwise (musterd restarted: it
      // forms round 1 again) they carry on until a RoundReady says whether the
      // round re-formed as it was.
      // Kept workers (KEEPING) wait for exactly that later round.
      if (group_ != nullptr && state_ != AgentState::kKeeping &&
          w.round() > round_.round() &&
          !KeepWorkers(absl::StrCat("round ", round_.round(),
                                    " went on without this node"))) {
        MUSTER_LOG(WARNING)
            << "round " << round_.round()
            << " went on without this node; stopping its workers";
        StopWorkers(kSignalTerminate);
        Transition(AgentState::kJoining, "Waiting for a later round");
      }
      if (w.joined() != last_waiting_joined_) {
        last_waiting_joined_ = w.joined();
        std::string wanted = absl::StrCat(w.min_nodes());
        if (w.max_nodes() > w.min_nodes())
          absl::StrAppend(&wanted, " (up to ", w.max_nodes(), ")");
        // A deadline of 0 means no deadline: a spare waiting for a place in the
        // next round.
        std::string until =
            w.deadline_unix_ms() == 0
                ? std::string("as a spare for the next round")
                : absl::StrCat("giving up at ",
                               FormatTime(w.deadline_unix_ms()));
        MUSTER_LOG(INFO) << "waiting for nodes: " << w.joined()
                         << " joined, need " << wanted << "; " << until;
      }
      return -1;
    }
    case v1::ServerMessage::kRoundReady:
      return OnRoundReady(msg.round_ready());
    case v1::ServerMessage::kRestart:
      OnRestart(msg.restart());
      return health_exit_;
    case v1::ServerMessage::kJobSucceeded:
      StopWorkers(kSignalTerminate);
      MUSTER_LOG(INFO) << "job '" << config_.run_id << "' succeeded";
      return kExitSuccess;
    case v1::ServerMessage::kJobFailed:
      StopWorkers(kSignalTerminate);
      PrintFailureSummary(msg.job_failed());
      return kExitJobFailed;
    case v1::ServerMessage::kCaptureHang:
      OnCaptureHang(msg.capture_hang());
      return -1;
    case v1::ServerMessage::kCaptureStacks:  // taken by the client's reader
    case v1::ServerMessage::kLeaseRenewed:   // taken by the client's reader
    case v1::ServerMessage::KIND_NOT_SET:
      return -1;
  }
  return -1;
}

int ElasticAgent::Impl::StopForSignal(int sig) {
  MUSTER_LOG(WARNING) << "received " << SignalName(sig) << "; stopping workers";
  if (group_ != nullptr) group_->Signal(sig);
  StopWorkers(sig);
  if (client_ != nullptr)
    client_->Close(absl::StrCat("agent stopped by ", SignalName(sig)));
  return Shutdown(kExitSignalBase + sig);
}

int ElasticAgent::Impl::Shutdown(int exit_code) {
  StopWorkers(kSignalTerminate);
  if (client_ != nullptr) {
    client_->Close("");
    client_.reset();
  }
  if (server_ != nullptr) {
    server_->Shutdown(absl::Seconds(1));
    server_.reset();
  }
  if (local_ != nullptr) {
    local_->Shutdown(absl::Seconds(1));
    local_.reset();
  }
  health_.reset();
  if (temp_run_dir_ && exit_code == kExitSuccess) {
    // A temporary log directory holds nothing worth keeping after a success.
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(run_dir_).parent_path(),
                                ec);
  }
  return exit_code;
}

int ElasticAgent::Impl::Run() {
  if (int rc = Setup(); rc >= 0) return Shutdown(rc);
  while (true) {
    if (int sig = stop_signal_.load(); sig != 0) return StopForSignal(sig);
    CheckWorkers();
    if (FenceDue() || std::exchange(fence_pending_, false)) {
      FenceWorkers();  // lease fencing: the session is as good as lost
      if (int rc = OnSessionLost(absl::UnavailableError(
              "lease fence: no lease renewal from the rendezvous server; "
              "reconnecting"));
          rc >= 0)
        return rc;
      continue;
    }
    PublishHealth();
    absl::Duration wait =
        state_ == AgentState::kRunning
            ? absl::Milliseconds(1)
            : std::min(config_.monitor_interval, absl::Milliseconds(100));
    absl::StatusOr<v1::ServerMessage> msg = client_->Next(wait);
    if (msg.ok()) {
      session_got_message_ = true;
      if (int rc = Handle(*msg); rc >= 0) return Shutdown(rc);
      continue;
    }
    if (msg.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
    if (msg.status().code() == absl::StatusCode::kUnavailable) {
      if (int rc = OnSessionLost(msg.status()); rc >= 0) return rc;
      continue;
    }
    // The session is over without a verdict.
    const absl::Status& s = msg.status();
    MUSTER_LOG(ERROR) << s.message();
    int rc = kExitJobFailed;
    if (s.code() == absl::StatusCode::kFailedPrecondition ||
        s.code() == absl::StatusCode::kInvalidArgument ||
        // A missing or wrong job token, or a node id taken by another agent:
        // retrying cannot help.
        s.code() == absl::StatusCode::kUnauthenticated ||
        s.code() == absl::StatusCode::kPermissionDenied ||
        s.code() == absl::StatusCode::kAlreadyExists) {
      rc = kExitConfigError;
    } else if (s.code() == absl::StatusCode::kUnavailable) {
      rc = kExitUnavailable;
    }
    return Shutdown(rc);
  }
}

}  // namespace muster::agent
