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

// Join.straggler_action's words, as the flag spells them.
const char* StragglerActionName(StragglerAction action) {
  switch (action) {
    case StragglerAction::kReplace:
      return "replace";
    case StragglerAction::kExclude:
      return "exclude";
    case StragglerAction::kReport:
      break;
  }
  return "report";
}

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
  StartPump();
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
  // The job's straggler policy (docs/architecture.md, "Stragglers"), sent
  // always: musterd scores a standalone job's ranks too, and `report` names
  // them. Values are explicit so that musterd's defaults changing later does
  // not change what a command line meant.
  join_.set_straggler_action(StragglerActionName(config_.straggler_action));
  join_.set_straggler_threshold(config_.straggler_threshold);
  join_.set_straggler_window_ms(
      absl::ToInt64Milliseconds(config_.straggler_window));
  join_.set_exclude_cooldown_ms(
      absl::ToInt64Milliseconds(config_.exclude_cooldown));
  join_.set_exclude_after_failures(config_.exclude_after_failures);
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

GroupStatus ElasticAgent::Impl::StopWorkers(int sig) {
  if (group_ == nullptr) return GroupStatus{};
  GroupStatus status = group_->Stop(sig, config_.stop_grace);
  ReleaseGroup();
  return status;
}

void ElasticAgent::Impl::PrintFailureSummary(const v1::JobFailed& failed) {
  const std::string out = FormatFailureSummary(
      failed, {config_.run_id, config_.python_interpreter,
               config_.python_source, run_dir_, hang_report_});
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

int ElasticAgent::Impl::Shutdown(int exit_code) {
  StopWorkers(kSignalTerminate);
  EndSession("");
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
    // The keeper removes it after we exit: removing 7 directories waited
    // 5-25 ms on the disk, more than the rest of a launch.
    const std::string temp_dir =
        std::filesystem::path(run_dir_).parent_path().string();
    if (!platform::KeeperRemoveTreeAtExit(temp_dir)) {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir, ec);
    }
  }
  return exit_code;
}

absl::Duration ElasticAgent::Impl::NextWait() const {
  const absl::Time now = clock_->Now();
  absl::Time until = now + config_.monitor_interval;
  if (group_ != nullptr) {
    // Lease fencing: a renewal only moves an armed fence later; the first one
    // arms it no sooner than 0.7 lease after a heartbeat's send, so a tenth
    // of the lease is early enough to see it.
    until = std::min(until, fence_->armed() ? fence_->FenceAt()
                                            : now + fence_->lease() / 10);
  }
  if (state_ == AgentState::kRunning && group_ != nullptr &&
      watchdog_ != nullptr) {
    until = std::min(until, next_watchdog_check_);
  }
  return std::max(absl::ZeroDuration(), until - now);
}

int ElasticAgent::Impl::Run() {
  if (int rc = Setup(); rc >= 0) return Shutdown(rc);
  while (true) {
    if (int sig = stop_signal_.load(); sig != 0) {
      AgentEvent stop;
      stop.kind = EventKind::kStopSignal;
      stop.signal = sig;
      return Dispatch(std::move(stop));
    }
    if (int rc = CheckWorkers(); rc >= 0) return rc;
    if (FenceDue() || std::exchange(fence_pending_, false)) {
      AgentEvent fence;
      fence.kind = EventKind::kFenceDue;
      if (int rc = Dispatch(std::move(fence)); rc >= 0) return rc;
      continue;
    }
    PublishHealth();
    // Nothing to do until something happens: a message, a worker's end, a
    // stop request (each wakes the inbox), or the next deadline.
    std::optional<AgentInbox::Item> msg = inbox_->Take();
    if (!msg.has_value()) {
      inbox_->Wait(NextWait());
      continue;
    }
    if (msg->ok()) {
      session_got_message_ = true;
      if (int rc = Dispatch(EventOf(**msg)); rc >= 0) return rc;
      continue;
    }
    AgentEvent ended;
    ended.kind = msg->status().code() == absl::StatusCode::kUnavailable
                     ? EventKind::kSessionLost
                     : EventKind::kSessionEnded;
    ended.code = msg->status().code();
    ended.reason = std::string(msg->status().message());
    if (int rc = Dispatch(std::move(ended)); rc >= 0) return rc;
  }
}

}  // namespace muster::agent
