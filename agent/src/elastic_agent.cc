#include "muster/agent/elastic_agent.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/src/lease_fence.h"
#include "agent/src/numa_binding.h"
#include "agent/src/preflight.h"
#include "agent/src/watchdog.h"
#include "muster/agent/exit_codes.h"
#include "muster/agent/job_keeper.h"
#include "muster/agent/worker_env.h"
#include "muster/agent/worker_group.h"
#include "muster/common/http_server.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/local_rendezvous.h"
#include "muster/rendezvous/server.h"
#include "nlohmann/json.hpp"

namespace muster::agent {
namespace {

enum class AgentState {
  kJoining,   // Join sent; waiting for RoundReady
  kRunning,   // workers of the current round are running
  kReported,  // workers ended and the outcome was reported; waiting for the
              // server's verdict
};

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", sig);
}

std::string DescribeExit(int exit_code, int sig) {
  if (sig != 0) return absl::StrCat("killed by ", SignalName(sig));
  return absl::StrCat("exited with code ", exit_code);
}

std::string FormatTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3S%Ez",
                          absl::FromUnixMillis(unix_ms), absl::LocalTimeZone());
}

std::string RandomSuffix() {
  std::random_device rd;
  return absl::StrFormat("%08x", rd());
}

}  // namespace

class ElasticAgent::Impl {
 public:
  explicit Impl(AgentConfig config) : config_(std::move(config)) {}

  int Run();
  void RequestStop(int sig) { stop_signal_.store(sig); }

 private:
  // Start-up: the embedded server (when the mode wants one) and the session.
  int Setup();
  absl::Status MaybeEmbedServer();
  // One message from the server; returns an exit status when the job is over,
  // or -1.
  int Handle(const v1::ServerMessage& msg);
  int OnRoundReady(const v1::RoundReady& ready);
  void OnRestart(const v1::Restart& restart);
  // Checks the running workers and reports their outcome.
  void CheckWorkers();
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
  int StopForSignal(int sig);
  absl::Status Rejoin();
  // --- lease fencing (agent/src/lease_fence.h) and round claims
  // Options of a session with the server, lease hooks included.
  rendezvous::GrpcClientOptions ClientOptions(absl::Duration connect_timeout);
  // join_ with the round this node's workers were last started for (a
  // restarted musterd re-adopts it; see RoundClaim in rendezvous.proto).
  v1::Join JoinWithClaim() const;
  // The lease is about to end: stop the workers now (grace 0.2 lease, then
  // SIGKILL), before musterd can give their ranks to another round.
  void FenceWorkers();
  bool FenceDue() const { return group_ != nullptr && fence_->FenceDue(); }
  // Workers start only under a lease that is not about to end: waits (up to
  // 0.3 lease) for the first renewal of this agent's life. False when the
  // lease is about to end (the session is as good as lost). An older musterd
  // that never renews leaves the agent unfenced, as before.
  bool AwaitLease();
  bool fence_pending_ = false;  // AwaitLease failed: fence and reconnect
  // The session is lost (the stream broke, or the lease ended): reconnect or
  // give up. Returns an exit status, or -1 to carry on.
  int OnSessionLost(const absl::Status& why);
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
  std::string LogRunDir();
  void PrintFailureSummary(const v1::JobFailed& failed);

  // --health-port: what the probes see, copied from the loop's state.
  struct Health {
    const char* state = "JOINING";
    int64_t round = 0;
    int restart_count = 0;
    int group_rank = -1;
    int world_size = 0;
    int workers_running = 0;
  };
  absl::Status StartHealthServer();
  void PublishHealth();
  HttpResponse HealthMetrics();

  const AgentConfig config_;
  std::atomic<int> stop_signal_{0};
  std::unique_ptr<HttpServer> health_server_;
  absl::Mutex health_mu_;
  Health health_ ABSL_GUARDED_BY(health_mu_);

  std::unique_ptr<rendezvous::RendezvousServer> server_;
  // --standalone: the round forms in process, with no server (see
  // UseLocalRendezvous).
  std::unique_ptr<rendezvous::LocalRendezvous> local_;
  std::unique_ptr<rendezvous::RendezvousClient> client_;
  v1::Join join_;
  std::string endpoint_;
  // config_.security, without TLS when this agent's own embedded server
  // (plaintext) is the endpoint.
  rendezvous::ClientSecurity security_;

  AgentState state_ = AgentState::kJoining;
  v1::RoundReady round_;
  std::unique_ptr<WorkerGroup> group_;
  // --worker-timeout: watches the current group's progress files.
  std::unique_ptr<Watchdog> watchdog_;
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
  std::unique_ptr<LeaseFence> fence_;
};

ElasticAgent::ElasticAgent(AgentConfig config)
    : impl_(std::make_unique<Impl>(std::move(config))) {}
ElasticAgent::~ElasticAgent() = default;
int ElasticAgent::Run() { return impl_->Run(); }
void ElasticAgent::RequestStop(int signal) { impl_->RequestStop(signal); }

absl::Status ElasticAgent::Impl::MaybeEmbedServer() {
  if (config_.mode == RendezvousMode::kStandalone) {
    // One node, so no other agent to reach: the session is a call into an
    // in-process Coordinator, and the workers' Store service starts only if
    // a worker connects (rendezvous/local_rendezvous.h). It saves the gRPC
    // server's start and shutdown, most of a no-op job's launch time.
    // MUSTER_STANDALONE_SERVER=1 embeds the gRPC server as before (for
    // `muster status` on a standalone job).
    const char* server = std::getenv("MUSTER_STANDALONE_SERVER");
    if (server == nullptr || std::string(server) != "1") {
      rendezvous::LocalRendezvousOptions options;
      options.coordinator.event_log_level = LogLevel::kDebug;
      auto local = rendezvous::LocalRendezvous::Start(std::move(options));
      if (!local.ok()) return local.status();
      local_ = *std::move(local);
      MUSTER_LOG(DEBUG) << "in-process rendezvous; the workers' store at "
                        << local_->store_endpoint();
      return absl::OkStatus();
    }
  }
  std::string listen = config_.embed_listen;
  bool embed = config_.embed_server;
  if (!embed && config_.embed_if_local) {
    // torchrun's is_host guess: the endpoint names this host and nobody serves
    // it yet.
    auto hp = ParseHostPort(config_.rdzv_endpoint, 29400);
    if (hp.ok() && IsLocalHost(hp->host) &&
        !CanConnect(hp->host.empty() ? "127.0.0.1" : hp->host, hp->port,
                    absl::Milliseconds(200))) {
      embed = true;
      listen = absl::StrCat("0.0.0.0:", hp->port);
    }
  }
  if (!embed) return absl::OkStatus();
  rendezvous::ServerOptions options;
  options.listen = listen;
  if (config_.max_nodes == 1) {
    // Only this node will ever join: its own lines say all the server's would.
    options.coordinator.event_log_level = LogLevel::kDebug;
  }
  auto server = rendezvous::RendezvousServer::Start(options);
  if (!server.ok()) {
    if (!config_.embed_server) {
      // Another agent on this host won the race to host the server: join it as
      // a client.
      MUSTER_LOG(INFO) << "another agent hosts the rendezvous server at "
                       << config_.rdzv_endpoint << "; joining it";
      return absl::OkStatus();
    }
    return server.status();
  }
  server_ = *std::move(server);
  MUSTER_LOG(DEBUG) << "embedded rendezvous server on " << server_->address();
  return absl::OkStatus();
}

absl::Status ElasticAgent::Impl::StartHealthServer() {
  if (config_.health_port < 0) return absl::OkStatus();
  auto server = HttpServer::Start(
      absl::StrCat("0.0.0.0:", config_.health_port),
      {{"/healthz",
        [] {
          return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
        }},
       {"/readyz",
        [this] {
          absl::MutexLock lock(&health_mu_);
          // Ready means this node's workers are running in a formed round.
          bool ready = health_.workers_running > 0;
          return HttpResponse{
              ready ? 200 : 503, "text/plain; charset=utf-8",
              absl::StrCat(health_.state, " round ", health_.round, "\n")};
        }},
       {"/metrics", [this] { return HealthMetrics(); }}});
  if (!server.ok()) return server.status();
  health_server_ = *std::move(server);
  MUSTER_LOG(INFO) << "serving /healthz, /readyz, /metrics on port "
                   << health_server_->port();
  return absl::OkStatus();
}

void ElasticAgent::Impl::PublishHealth() {
  if (health_server_ == nullptr) return;
  absl::MutexLock lock(&health_mu_);
  health_.state = state_ == AgentState::kJoining   ? "JOINING"
                  : state_ == AgentState::kRunning ? "RUNNING"
                                                   : "REPORTED";
  health_.round = attempt_ >= 0 ? round_.round() : 0;
  health_.restart_count = round_.restart_count();
  health_.group_rank = attempt_ >= 0 ? round_.group_rank() : -1;
  health_.world_size = round_.world_size();
  health_.workers_running = group_ != nullptr && state_ == AgentState::kRunning
                                ? config_.nproc_per_node
                                : 0;
}

HttpResponse ElasticAgent::Impl::HealthMetrics() {
  absl::MutexLock lock(&health_mu_);
  const std::string job =
      absl::StrCat("job=\"", PrometheusLabel(config_.run_id), "\"");
  std::string body;
  auto gauge = [&](const char* name, const char* help, double value,
                   const std::string& labels) {
    absl::StrAppend(&body, "# HELP ", name, " ", help, "\n# TYPE ", name,
                    " gauge\n", name, "{", labels, "} ", value, "\n");
  };
  gauge("muster_agent_round", "The round this node is in (0 before the first).",
        static_cast<double>(health_.round), job);
  gauge("muster_agent_restarts", "Worker-failure restarts the job has taken.",
        health_.restart_count, job);
  gauge("muster_agent_group_rank",
        "This node's group rank (-1 before the first round).",
        health_.group_rank, job);
  gauge("muster_agent_world_size", "WORLD_SIZE of the current round.",
        health_.world_size, job);
  gauge("muster_agent_workers_running", "Workers of this node running now.",
        health_.workers_running, job);
  gauge("muster_agent_state", "1 for the agent's current state.", 1,
        absl::StrCat(job, ",state=\"", health_.state, "\""));
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", body};
}

int ElasticAgent::Impl::Setup() {
  fence_ = std::make_unique<LeaseFence>(config_.lease_timeout, Clock::Real());
  if (absl::Status s = StartHealthServer(); !s.ok()) {
    MUSTER_LOG(ERROR) << "--health-port: " << s.message();
    return kExitConfigError;
  }
  if (absl::Status s = MaybeEmbedServer(); !s.ok()) {
    MUSTER_LOG(ERROR) << "cannot start the rendezvous server: " << s.message();
    if (config_.mode != RendezvousMode::kStandalone) {
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
  if (local_ != nullptr) {
    endpoint_ = local_->store_endpoint();
  } else if (config_.mode == RendezvousMode::kStandalone || endpoint_.empty()) {
    endpoint_ = absl::StrCat("127.0.0.1:", server_ ? server_->port() : 29400);
  }
  security_ = config_.security;
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
  join_.set_node_id(
      absl::StrCat(hostname, "-", getpid(), "-", RandomSuffix().substr(0, 4)));
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
  join_.set_lease_timeout_ms(absl::ToInt64Milliseconds(config_.lease_timeout));

  client_ = local_ != nullptr ? local_->NewClient()
                              : rendezvous::NewGrpcRendezvousClient(
                                    ClientOptions(config_.connect_timeout));
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
  session_started_ = absl::Now();
  MUSTER_LOG(INFO) << "joined job '" << config_.run_id << "' at "
                   << (local_ != nullptr ? "the in-process rendezvous"
                                         : endpoint_)
                   << " as node " << join_.node_id() << " ("
                   << config_.nproc_per_node << " workers, nnodes "
                   << config_.min_nodes << ":" << config_.max_nodes << ")";
  return -1;
}

std::string ElasticAgent::Impl::LogRunDir() {
  if (!run_dir_.empty()) return run_dir_;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (config_.log_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path(ec) / "muster-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) {
      run_dir_ = (fs::path(tmpl) / config_.run_id).string();
      temp_run_dir_ = true;
    }
  } else {
    // Never overwrite the logs of an earlier run with the same id: add a suffix
    // instead.
    fs::path base = fs::path(config_.log_dir) / config_.run_id;
    fs::path dir = base;
    for (int i = 1; fs::exists(dir, ec); ++i) {
      dir = base.string() + "_" + std::to_string(i);
    }
    run_dir_ = dir.string();
  }
  fs::create_directories(run_dir_, ec);
  if (ec)
    MUSTER_LOG(WARNING) << "cannot create log directory " << run_dir_ << ": "
                        << ec.message();
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
                          {"timestamp", absl::ToUnixMillis(absl::Now())},
                          {"metadata", std::move(metadata)}};
  std::string line =
      event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void ElasticAgent::Impl::ReleaseGroup() {
  if (group_ == nullptr) return;
  for (int pid : group_->pids()) KeeperForgetGroup(pid);
  group_.reset();
}

int ElasticAgent::Impl::OnRoundReady(const v1::RoundReady& ready) {
  if (attempt_ >= 0 && SameRound(ready) &&
      (group_ != nullptr || state_ == AgentState::kReported)) {
    // The same round again after a reconnect: the workers carry on, and an
    // outcome this agent reported while the server was away is reported again.
    if (state_ == AgentState::kReported && last_report_.has_value())
      Report(*last_report_);
    if (state_ == AgentState::kJoining) state_ = AgentState::kRunning;
    return -1;
  }
  // Workers of an earlier round still running (the session was lost and the
  // round moved on without this node) are stopped before the new round's start.
  StopWorkers(SIGTERM);
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
      state_ = AgentState::kReported;
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
  if (!JobKeeperTag().empty()) base[kJobTagVariable] = JobKeeperTag();
  const std::vector<std::vector<int>>& numa_cpus = NumaCpus();

  std::vector<WorkerSpec> workers;
  std::vector<std::string> progress_files;
  for (int local = 0; local < config_.nproc_per_node; ++local) {
    WorkerEnvParams p;
    p.local_rank = local;
    p.rank = ready.rank_offset() + local;
    p.world_size = ready.world_size();
    p.local_world_size = config_.nproc_per_node;
    p.group_rank = ready.group_rank();
    p.group_world_size = ready.group_world_size();
    p.role_rank = p.rank;
    p.role_world_size = ready.world_size();
    p.role_name = config_.role;
    p.master_addr = ready.master_addr();
    p.master_port = ready.master_port();
    p.restart_count = ready.restart_count();
    p.max_restarts = ready.max_restarts();
    p.run_id = config_.run_id;
    p.error_file = absl::StrCat(attempt_dir, "/", local, "/error.json");
    p.progress_file = absl::StrCat(attempt_dir, "/", local, "/progress");
    progress_files.push_back(p.progress_file);
    p.store_endpoint = endpoint_;
    p.store_prefix = ready.store_prefix();
    p.round = ready.round();
    p.virtual_local_rank = config_.virtual_local_rank;
    if (!security_.token.empty()) {
      p.store_token =
          rendezvous::DeriveStoreCredential(security_.token, p.store_prefix);
    }
    p.store_tls_ca = security_.tls_ca;
    p.store_tls_cert = security_.tls_cert;
    p.store_tls_key = security_.tls_key;
    std::error_code ec;
    std::filesystem::create_directories(absl::StrCat(attempt_dir, "/", local),
                                        ec);
    WorkerSpec spec;
    spec.local_rank = local;
    spec.global_rank = p.rank;
    spec.argv = config_.program;
    spec.error_file = p.error_file;
    spec.env = BuildWorkerEnv(base, p);
    if (static_cast<size_t>(local) < numa_cpus.size())
      spec.cpu_affinity = numa_cpus[static_cast<size_t>(local)];
    workers.push_back(std::move(spec));
  }
  OutputOptions output;
  output.redirects = config_.redirects;
  output.tees = config_.tees;
  output.console_local_ranks = config_.local_ranks_filter;
  output.attempt_dir = attempt_dir;
  output.duplicate_stdout_filters = config_.duplicate_stdout_filters;
  output.duplicate_stderr_filters = config_.duplicate_stderr_filters;

  MUSTER_LOG(INFO) << "round " << ready.round() << ": node "
                   << ready.group_rank() << "/" << ready.group_world_size()
                   << ", ranks " << ready.rank_offset() << ".."
                   << ready.rank_offset() + config_.nproc_per_node - 1 << " of "
                   << ready.world_size() << ", master " << ready.master_addr()
                   << ":" << ready.master_port() << ", restarts "
                   << ready.restart_count() << "/" << ready.max_restarts();
  if (!AwaitLease()) {  // lease fencing
    MUSTER_LOG(WARNING) << "round " << ready.round()
                        << ": this node's lease is about to end; not starting "
                           "its workers";
    fence_pending_ = true;
    return -1;
  }
  auto group = WorkerGroup::Start(std::move(workers), std::move(output));
  if (!group.ok()) {
    // The program cannot run here (not found, not executable): no restart can
    // mend that.
    MUSTER_LOG(ERROR) << group.status().message();
    client_->Close("cannot start the workers: " +
                   std::string(group.status().message()));
    return kExitConfigError;
  }
  group_ = *std::move(group);
  for (int pid : group_->pids()) KeeperWatchGroup(pid);
  state_ = AgentState::kRunning;
  watchdog_.reset();
  if (config_.worker_timeout > absl::ZeroDuration()) {
    watchdog_ = std::make_unique<Watchdog>(
        config_.worker_timeout, std::move(progress_files), absl::Now());
  }
  return -1;
}

GroupStatus ElasticAgent::Impl::StopWorkers(int sig) {
  if (group_ == nullptr) return GroupStatus{};
  GroupStatus status = group_->Stop(sig, config_.stop_grace);
  ReleaseGroup();
  return status;
}

bool ElasticAgent::Impl::AwaitLease() {
  if (local_ != nullptr) return true;  // in process: nothing to fence
  const absl::Time until = absl::Now() + fence_->lease() * 3 / 10;
  while (!fence_->armed() && absl::Now() < until)
    absl::SleepFor(absl::Milliseconds(2));
  return !fence_->armed() || !fence_->FenceDue();
}

rendezvous::GrpcClientOptions ElasticAgent::Impl::ClientOptions(
    absl::Duration connect_timeout) {
  rendezvous::GrpcClientOptions options;
  options.endpoint = endpoint_;
  options.connect_timeout = connect_timeout;
  options.heartbeat_interval = config_.heartbeat_interval;
  options.security = security_;
  LeaseFence* fence = fence_.get();
  options.lease_seq = [fence] { return fence->NextSeq(); };
  options.on_lease_renewed = [fence](int64_t seq) { fence->OnRenewed(seq); };
  return options;
}

v1::Join ElasticAgent::Impl::JoinWithClaim() const {
  v1::Join join = join_;
  if (round_.round() > 0) {
    v1::RoundClaim* claim = join.mutable_claim();
    *claim->mutable_round() = round_;
    claim->mutable_round()->clear_peers();
    claim->set_workers_running(group_ != nullptr &&
                               state_ == AgentState::kRunning);
    claim->set_reported(state_ == AgentState::kReported &&
                        last_report_.has_value());
  }
  return join;
}

void ElasticAgent::Impl::FenceWorkers() {
  MUSTER_LOG(ERROR)
      << "lease fence: musterd has not renewed this node's lease for "
      << absl::FormatDuration(
             absl::Trunc(absl::Now() - (fence_->LeaseEnd() - fence_->lease()),
                         absl::Milliseconds(1)))
      << " (lease_timeout " << absl::FormatDuration(fence_->lease())
      << "); stopping the workers of round " << round_.round()
      << " before it could give their ranks to another round";
  if (group_ != nullptr) group_->Stop(SIGTERM, fence_->FenceGrace());
  ReleaseGroup();
  state_ = AgentState::kJoining;
}

int ElasticAgent::Impl::OnSessionLost(const absl::Status& why) {
  MUSTER_LOG(WARNING) << why.message();
  // A session that got a message or lasted a while ended for a new
  // reason (the server went away): a fresh reconnect window.
  constexpr absl::Duration kQuickEnd = absl::Seconds(2);
  if (session_got_message_ || absl::Now() - session_started_ > kQuickEnd) {
    unavailable_since_ = absl::InfiniteFuture();
  }
  if (unavailable_since_ == absl::InfiniteFuture()) {
    unavailable_since_ = absl::Now();
    unavailable_backoff_ = absl::Milliseconds(100);
  } else {
    // The last reconnect worked and the server ended the session again:
    // back off here too, or the two would loop as fast as they can.
    absl::SleepFor(std::min(
        unavailable_backoff_,
        std::max(
            absl::ZeroDuration(),
            unavailable_since_ + config_.reconnect_timeout - absl::Now())));
    unavailable_backoff_ = std::min(unavailable_backoff_ * 2, absl::Seconds(1));
  }
  if (Reconnect(unavailable_since_ + config_.reconnect_timeout)) {
    session_started_ = absl::Now();
    session_got_message_ = false;
    return -1;
  }
  if (int sig = stop_signal_.load(); sig != 0) return StopForSignal(sig);
  return Shutdown(kExitUnavailable);
}

absl::Status ElasticAgent::Impl::Rejoin() {
  v1::AgentMessage msg;
  state_ = AgentState::kJoining;
  *msg.mutable_join() = JoinWithClaim();
  return client_->Send(msg);
}

void ElasticAgent::Impl::OnRestart(const v1::Restart& restart) {
  MUSTER_LOG(WARNING) << "round " << restart.round()
                      << " ended: " << restart.reason()
                      << "; stopping workers and rejoining";
  StopWorkers(SIGTERM);
  if (absl::Status s = Rejoin(); !s.ok()) {
    MUSTER_LOG(ERROR) << "cannot rejoin: " << s.message();
  }
}

void ElasticAgent::Impl::CheckWorkers() {
  if (state_ != AgentState::kRunning || group_ == nullptr) return;
  if (watchdog_ != nullptr && absl::Now() >= next_watchdog_check_) {
    // A few stat() calls per check; no need to make them at the loop's pace.
    next_watchdog_check_ = absl::Now() + std::min(config_.monitor_interval,
                                                  watchdog_->timeout() / 10);
    for (int local : watchdog_->Check(absl::Now())) {
      std::string reason = absl::StrCat(
          "hung: no progress for ", absl::FormatDuration(watchdog_->timeout()),
          " (--worker-timeout); killed by the watchdog");
      MUSTER_LOG(ERROR) << "worker local rank " << local << " (rank "
                        << round_.rank_offset() + local << ") " << reason;
      group_->Kill(local, reason);
    }
  }
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
    const GroupStatus stopped = StopWorkers(SIGTERM);
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
  state_ = AgentState::kReported;
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

bool ElasticAgent::Impl::Reconnect(absl::Time deadline) {
  // The in-process rendezvous ends a session only when it shuts down.
  if (local_ != nullptr) return false;
  MUSTER_LOG(WARNING)
      << "reconnecting to the rendezvous server at " << endpoint_
      << " for up to "
      << absl::FormatDuration(
             absl::Ceil(std::max(absl::ZeroDuration(), deadline - absl::Now()),
                        absl::Seconds(1)))
      << (group_ != nullptr ? "; the workers keep running" : "");
  client_->Close("");
  client_.reset();
  absl::Duration backoff = absl::Milliseconds(50);
  int attempts = 0;
  while (absl::Now() < deadline) {
    if (stop_signal_.load() != 0) return false;
    ++attempts;
    // Lease fencing: a connect attempt ends before the fence is due, and the
    // fence is checked between attempts.
    if (FenceDue()) FenceWorkers();
    absl::Duration connect = std::min(absl::Seconds(1), deadline - absl::Now());
    if (group_ != nullptr && fence_->armed()) {
      connect = std::max(absl::Milliseconds(50),
                         std::min(connect, fence_->FenceAt() - absl::Now()));
    }
    rendezvous::GrpcClientOptions options = ClientOptions(connect);
    auto client = rendezvous::NewGrpcRendezvousClient(options);
    absl::Status s = client->Start(JoinWithClaim());
    if (s.ok()) {
      client_ = std::move(client);
      if (attempt_ >= 0) client_->SetRound(round_.round());
      MUSTER_LOG(INFO) << "reconnected to " << endpoint_ << " after "
                       << attempts
                       << (attempts == 1 ? " attempt" : " attempts");
      return true;
    }
    MUSTER_LOG(DEBUG) << "reconnect attempt " << attempts << ": "
                      << s.message();
    absl::SleepFor(std::min(
        backoff, std::max(absl::ZeroDuration(), deadline - absl::Now())));
    // While workers run, their lease is running out: try at least twice a
    // second (a musterd restarted in 0.3 s is found at once).
    backoff = std::min(backoff * 2, group_ != nullptr ? absl::Milliseconds(500)
                                                      : absl::Seconds(1));
  }
  MUSTER_LOG(ERROR) << "could not rejoin through the rendezvous server at "
                    << endpoint_ << " within "
                    << absl::FormatDuration(config_.reconnect_timeout) << " ("
                    << attempts << " attempts)";
  return false;
}

void ElasticAgent::Impl::PrintFailureSummary(const v1::JobFailed& failed) {
  std::string out = absl::StrCat("\n", std::string(72, '='), "\n",
                                 "muster: job '", config_.run_id, "' FAILED\n",
                                 "root cause: ", failed.root_cause(), "\n");
  bool module_missing = false;
  if (failed.failures_size() > 0) {
    absl::StrAppend(&out, "failures of the last round:\n");
    for (const v1::WorkerFailure& f : failed.failures()) {
      absl::StrAppend(
          &out, "  rank ", f.global_rank(), " (local rank ", f.local_rank(),
          ") on ", f.hostname(), ": ", DescribeExit(f.exit_code(), f.signal()),
          ", pid ", f.pid(), ", at ", FormatTime(f.timestamp_unix_ms()), "\n");
      if (!f.error_message().empty()) {
        absl::StrAppend(&out, "    error: ", f.error_message(), "\n");
      }
      if (!f.traceback().empty()) {
        // As torchrun's summary: the worker's own traceback, indented.
        absl::StrAppend(&out, "    traceback:\n");
        for (absl::string_view line : absl::StrSplit(
                 absl::StripTrailingAsciiWhitespace(f.traceback()), '\n')) {
          absl::StrAppend(&out, "      ", line, "\n");
        }
      }
      const std::string text = absl::StrCat(f.error_message(), f.traceback());
      if (!config_.python_interpreter.empty() &&
          (absl::StrContains(text, "ModuleNotFoundError") ||
           absl::StrContains(text, "No module named"))) {
        module_missing = true;
      }
    }
  }
  if (module_missing) {
    absl::StrAppend(&out, "the workers ran Python ", config_.python_interpreter,
                    " (", config_.python_source,
                    "); if the module is installed for another interpreter, "
                    "choose it with --python=PATH or PYTHON_EXEC=PATH\n");
  }
  if (!run_dir_.empty())
    absl::StrAppend(&out, "worker logs and error files: ", run_dir_, "\n");
  absl::StrAppend(&out, std::string(72, '='), "\n");
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
      if (group_ != nullptr && w.round() > round_.round()) {
        MUSTER_LOG(WARNING)
            << "round " << round_.round()
            << " went on without this node; stopping its workers";
        StopWorkers(SIGTERM);
        state_ = AgentState::kJoining;
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
      return -1;
    case v1::ServerMessage::kJobSucceeded:
      StopWorkers(SIGTERM);
      MUSTER_LOG(INFO) << "job '" << config_.run_id << "' succeeded";
      return kExitSuccess;
    case v1::ServerMessage::kJobFailed:
      StopWorkers(SIGTERM);
      PrintFailureSummary(msg.job_failed());
      return kExitJobFailed;
    case v1::ServerMessage::kLeaseRenewed:  // taken by the client's reader
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
  StopWorkers(SIGTERM);
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
  health_server_.reset();
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
