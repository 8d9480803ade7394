#include "muster/rendezvous/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "muster/common/http_server.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/platform/clock.h"
#include "muster/store/grpc_security.h"
#include "muster/store/served_store.h"
#include "rendezvous/src/service/console_api.h"
#include "rendezvous/src/service/leader_gate.h"
#include "rendezvous/src/service/metrics.h"
#ifdef MUSTER_WITH_ETCD
#include "rendezvous/src/replica/replica.h"
#endif
#include "muster/store/store_service.h"
#include "rendezvous/src/core/tick_loop.h"
#include "rendezvous/src/server/state_journal.h"
#include "rendezvous/src/service/session_service.h"

namespace muster::rendezvous {
namespace {

constexpr int kDefaultPort = 29400;

// Process-wide gRPC settings, made once before the first server is built
// (neither call is thread-safe in gRPC).
void InitGrpcServerGlobals() {
  static std::once_flag once;
  std::call_once(once, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
}

}  // namespace

class RendezvousServer::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)),
        auth_(MakeAuthPolicy(options_)),
        store_(options_.store_limits),
        coordinator_(WithStoreCleanup(options_.coordinator, &store_, &auth_),
                     Clock::Real()),
        session_service_(&coordinator_, &auth_, &metrics_),
        store_service_(&store_, &auth_) {
    session_service_.SetGate(&gate_);
    store_service_.SetMetrics(&metrics_);
    store_service_.SetGate(&gate_);
  }

  ~Impl() { Shutdown(absl::Seconds(2)); }

  absl::Status Start() {
    if (options_.metrics_admin_only &&
        (options_.admin_token.empty() || options_.http_listen.empty())) {
      return absl::InvalidArgumentError(
          "--metrics-admin-only protects /metrics on --http-listen with the "
          "admin token: give --http-listen and --admin-token-file too");
    }
    absl::StatusOr<HostPort> where =
        ParseHostPort(options_.listen, kDefaultPort, /*allow_zero_port=*/true);
    if (!where.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad listen address: ", where.status().message()));
    }
    if (where->host.empty()) where->host = "0.0.0.0";
    if (options_.tick_interval <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tick_interval is ", absl::FormatDuration(options_.tick_interval),
          ": it must be positive"));
    }
    if (options_.session_queues < 0 || options_.session_queues > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("session_queues is ", options_.session_queues,
                       ": it must be 1 to 256 (0 for the default, ",
                       SessionService::DefaultQueues(), " here)"));
    }
    // A replica serves nothing until it wins the election.
    if (options_.replica.enabled()) {
      gate_.StandBy(options_.replica.advertise_addr.empty()
                        ? options_.listen
                        : options_.replica.advertise_addr,
                    "");
    }
    if (!options_.state_dir.empty()) {  // musterd --state-dir
      absl::StatusOr<std::unique_ptr<StateJournal>> journal =
          StateJournal::Open(options_.state_dir, &store_, &coordinator_,
                             options_.coordinator.adoption_grace, absl::Now());
      if (!journal.ok()) return journal.status();
      journal_ = *std::move(journal);
    }

    InitGrpcServerGlobals();
    grpc::ServerBuilder builder;
    store::AddMusterServerArguments(builder);
    int bound_port = 0;
    std::shared_ptr<grpc::ServerCredentials> credentials =
        grpc::InsecureServerCredentials();
    if (options_.tls.enabled()) {
      absl::StatusOr<std::unique_ptr<store::ServerTlsCredentials>> tls =
          store::ServerTlsCredentials::Create(options_.tls);
      if (!tls.ok()) return tls.status();
      tls_ = *std::move(tls);
      credentials = tls_->credentials();
    }
    builder.AddListeningPort(where->ToString(), credentials, &bound_port);
    builder.RegisterService(&session_service_);
    session_service_.AddCompletionQueues(
        builder, options_.session_queues > 0 ? options_.session_queues
                                             : SessionService::DefaultQueues());
    builder.RegisterService(store_service_.service());
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(metrics_.NewInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (server == nullptr || bound_port == 0) {
      if (server != nullptr) server->Shutdown(absl::ToChronoTime(absl::Now()));
      session_service_.StopStreams();
      return absl::UnavailableError(store::DescribeBindFailure(*where));
    }
    session_service_.StartStreams();
    server_ = std::move(server);
    port_ = bound_port;
    address_ = HostPort{where->host, bound_port}.ToString();
    if (grpc::HealthCheckServiceInterface* health =
            server_->GetHealthCheckService()) {
      health->SetServingStatus("", true);
      health->SetServingStatus(v1::Rendezvous::service_full_name(), true);
      health->SetServingStatus(v1::Store::service_full_name(), true);
    }
    if (!options_.http_listen.empty()) {
      // With TLS, the console and probes are HTTPS with the same
      // certificate: a token in an Authorization header never crosses the
      // network in plaintext.
      std::optional<HttpTlsFiles> https;
      if (options_.tls.enabled()) {
        https = HttpTlsFiles{options_.tls.cert, options_.tls.key};
      }
      auto http = HttpServer::Start(options_.http_listen, HttpRoutes(),
                                    std::move(https));
      if (!http.ok()) {
        server_->Shutdown(absl::ToChronoTime(absl::Now()));
        return http.status();
      }
      http_ = *std::move(http);
    }
#ifdef MUSTER_WITH_ETCD
    if (options_.replica.enabled()) {
      if (absl::Status s = StartReplica(*where); !s.ok()) {
        server_->Shutdown(absl::ToChronoTime(absl::Now()));
        return s;
      }
    }
#endif
    tick_thread_ = std::thread([this] { TickLoop(); });
    return absl::OkStatus();
  }

#ifdef MUSTER_WITH_ETCD
  // Joins the election. Until this replica leads, every call is refused
  // naming the leader.
  absl::Status StartReplica(const HostPort& bound) {
    ReplicaOptions replica = options_.replica;
    if (replica.advertise_addr.empty()) {
      const bool wildcard =
          bound.host == "0.0.0.0" || bound.host == "::" || bound.host.empty();
      replica.advertise_addr =
          HostPort{wildcard ? LocalHostname() : bound.host, port_}.ToString();
    }
    advertise_ = replica.advertise_addr;
    Replica::Server hooks{
        &store_, &coordinator_, &auth_, &gate_,
        [this](const std::string& leader) { StandBy(advertise_, leader); }};
    absl::StatusOr<std::unique_ptr<Replica>> r =
        Replica::Start(std::move(replica), std::move(hooks));
    if (!r.ok()) return r.status();
    replica_ = *std::move(r);
    replica_view_.store(replica_.get());
    return absl::OkStatus();
  }
#endif

  // The etcd members' health for the console (none without replicas). The
  // HTTP listener starts before the replica: it reads replica_view_.
  std::vector<EtcdMemberHealth> EtcdHealth() const {
#ifdef MUSTER_WITH_ETCD
    if (Replica* replica = replica_view_.load()) return replica->EtcdHealth();
#endif
    return {};
  }

  std::string ReplicaRole(std::string* leader) const {
#ifdef MUSTER_WITH_ETCD
    if (replica_ != nullptr) {
      if (leader != nullptr) *leader = replica_->leader();
      return Replica::StateName(replica_->state());
    }
#endif
    if (leader != nullptr) leader->clear();
    return "single";
  }

  int http_port() const { return http_ ? http_->port() : 0; }

  absl::Status ReloadTls() {
    if (tls_ == nullptr) {
      return absl::FailedPreconditionError(
          "this server runs without TLS (no --tls-cert): nothing to reload");
    }
    absl::Status grpc_side = tls_->Reload();
    if (!grpc_side.ok() || http_ == nullptr || !http_->tls()) return grpc_side;
    return http_->ReloadTls();
  }

  void Shutdown(absl::Duration grace) {
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_started_) {
        mu_.Await(absl::Condition(&shutdown_done_));
        return;
      }
      shutdown_started_ = true;
      draining_.store(true);
    }
    const absl::Time deadline = absl::Now() + grace;
#ifdef MUSTER_WITH_ETCD
    // A leader resigns first (its lease revoked): a standby takes over
    // without waiting for the lease to expire.
    if (replica_ != nullptr) replica_->Stop();
#endif
    if (server_ != nullptr) {
      MUSTER_LOG(DEBUG) << "rendezvous server on " << address_
                        << " is shutting down";
      if (grpc::HealthCheckServiceInterface* health =
              server_->GetHealthCheckService()) {
        health->SetServingStatus(false);
      }
    }
    const absl::Status going =
        absl::UnavailableError("musterd is shutting down");
    // What the Coordinator has decided (a job's verdict for its other agents)
    // goes out before the streams close.
    coordinator_.DrainOutbox();
    session_service_.CloseAll(going);
    store_service_.Shutdown(going);
    // Waits for every RPC to finish (streams flush and end, waits fail at
    // once), cancelling what is left at the deadline.
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(deadline));
    // Every call is finished or cancelled now: the Session queues drain.
    session_service_.StopStreams();
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (tick_thread_.joinable()) tick_thread_.join();
    if (journal_ != nullptr) {
      if (absl::Status s = journal_->WriteNow(); !s.ok())
        MUSTER_LOG(ERROR) << "--state-dir: " << s.message();
    }
    http_.reset();
    absl::MutexLock lock(&mu_);
    shutdown_done_ = true;
  }

  void Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&shutdown_done_));
  }

  void StandBy(const std::string& self, const std::string& leader) {
    gate_.StandBy(self, leader);
    const absl::Status why = gate_.Check();
    session_service_.EndOpen(why, leader);
    store_service_.EndOpen(why, leader);
  }
  void Lead(int64_t epoch) {
    coordinator_.SetEpoch(epoch);
    gate_.Lead(epoch);
  }
  LeaderGate& gate() { return gate_; }
  int64_t HeldEvents() const { return session_service_.HeldEvents(); }
  bool leading() const { return gate_.serving(); }

  int port() const { return port_; }
  const std::string& address() const { return address_; }
  Coordinator& coordinator() { return coordinator_; }
  store::KvStore& store() { return store_; }

 private:
  // The Coordinator's options, with on_round_end also dropping the round's
  // store namespace (or every round of a forgotten job, for a prefix "<job>/"),
  // and store_usage reading it.
  // A forgotten job's token binding goes with it.
  static CoordinatorOptions WithStoreCleanup(CoordinatorOptions options,
                                             store::KvStore* store,
                                             JobAuthRegistry* auth) {
    options.on_round_end = [store, auth,
                            user = std::move(options.on_round_end)](
                               const std::string& store_prefix) {
      if (absl::EndsWith(store_prefix, "/")) {
        store->DropNamespacesWithPrefix(store_prefix);
        auth->Forget(store_prefix);
      } else {
        store->DropNamespace(store_prefix);
      }
      if (user) user(store_prefix);
    };
    // A job's page and `muster status JOB` show its round's Store use against
    // the limits (a job about to hit one is named before it fails).
    options.store_usage = [store](const std::string& prefix,
                                  v1::StoreUsage* usage) {
      const store::KvStore::Usage used = store->NamespaceUsage(prefix);
      usage->set_keys(used.keys);
      usage->set_bytes(used.bytes);
      usage->set_max_keys(store->limits().max_namespace_keys);
      usage->set_max_bytes(store->limits().max_namespace_bytes);
    };
    return options;
  }

  // /healthz: the process serves. /readyz: it takes new work (503 while
  // draining). /metrics. /api/v1/...: the console API (console_api.h).
  std::map<std::string, HttpHandler> HttpRoutes() {
    return {
        {"/healthz",
         [](const HttpRequest&) {
           return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
         }},
        {"/readyz",
         [this](const HttpRequest&) {
           if (draining_.load()) {
             return HttpResponse{503, "text/plain; charset=utf-8",
                                 "draining\n"};
           }
           // Replicas: only the leader is ready, so a Kubernetes Service
           // routes to it alone.
           if (!gate_.serving()) {
             return HttpResponse{503, "text/plain; charset=utf-8",
                                 std::string(gate_.Check().message()) + "\n"};
           }
           return HttpResponse{200, "text/plain; charset=utf-8", "ready\n"};
         }},
        {"/metrics",
         [this](const HttpRequest& request) {
           if (options_.metrics_admin_only &&
               !ConsoleApi::IsAdmin(auth_, request)) {
             return HttpResponse{
                 401,
                 "text/plain; charset=utf-8",
                 "musterd runs with --metrics-admin-only: send its admin "
                 "token as \"Authorization: Bearer TOKEN\" (Prometheus: "
                 "authorization.credentials_file)\n",
                 {{"WWW-Authenticate", "Bearer realm=\"musterd\""}}};
           }
           return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                               metrics_.Render(coordinator_, store_)};
         }},
        {kConsoleApiPrefix,
         [this](const HttpRequest& request) {
           return console_.Serve(request);
         }},
        {"/", &ConsoleApi::ServePage},
        {kConsoleJobPrefix, &ConsoleApi::ServePage},
        {kConsoleFilePrefix, &ConsoleApi::ServePage},
    };
  }

  // Calls Tick at least every tick_interval, sooner when it asks to.
  void TickLoop() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);  // RunCoordinatorTicks releases it to tick
    RunCoordinatorTicks(
        coordinator_, mu_, stopping_, options_.tick_interval,
        [this] {
          if (journal_ != nullptr) journal_->MaybeWrite(absl::Now());
#ifdef MUSTER_WITH_ETCD
          if (replica_ != nullptr) replica_->Tick(absl::Now());
#endif
        },
        [this] { return MayTick(); });
  }

  // Before each Tick: a replica that does not lead (or cannot confirm that
  // it does) decides nothing. Once confirmed again after a lapse, the
  // silence clocks restart (what agents sent was held, not heard), the held
  // events reach the Coordinator in order, and the held output leaves: only
  // then may the Tick decide by time. Tick thread only.
  bool MayTick() {
    if (!gate_.serving()) {
      if (gate_.leads() && lapse_started_ == absl::InfiniteFuture())
        lapse_started_ = absl::Now();
      return false;
    }
    // The lapse may have ended before this thread saw it (a paused process
    // resumes and its renewal thread runs first): the gate counts them.
    const int64_t lapses = gate_.lapses();
    if (lapses != lapses_seen_ && lapse_started_ == absl::InfiniteFuture())
      lapse_started_ = absl::Now();
    lapses_seen_ = lapses;
    if (lapse_started_ != absl::InfiniteFuture()) {
      coordinator_.ForgiveSilence();
      MUSTER_LOG(WARNING)
          << "musterd confirmed its leadership again after "
          << absl::FormatDuration(absl::Trunc(absl::Now() - lapse_started_,
                                              absl::Milliseconds(1)))
          << " without: acting now on what agents sent meanwhile; no node "
             "was declared lost by the silence";
      lapse_started_ = absl::InfiniteFuture();
    }
    session_service_.ReleaseHeld();
    store_service_.ReleaseHeld();
    return true;
  }

  static AuthPolicy MakeAuthPolicy(const ServerOptions& options) {
    AuthPolicy policy;
    policy.require_token = options.require_token;
    if (!options.admin_token.empty())
      policy.admin_digest = HashSecret(options.admin_token);
    return policy;
  }

  const ServerOptions options_;
  // Declared before what uses them: destroyed after the server and the
  // services.
  JobAuthRegistry auth_;
  std::unique_ptr<store::ServerTlsCredentials> tls_;
  RpcMetrics metrics_;
  std::atomic<bool> draining_{false};
  LeaderGate gate_;
  // When the tick thread first saw the leadership unconfirmed (MayTick);
  // InfiniteFuture: confirmed. Tick thread only.
  absl::Time lapse_started_ = absl::InfiniteFuture();
  int64_t lapses_seen_ = 0;  // gate_.lapses() at the last MayTick
  store::KvStore store_;
  Coordinator coordinator_;
  SessionService session_service_;
  store::StoreService store_service_;
  ConsoleApi console_{&coordinator_, &auth_,
                      &gate_,        session_service_.stacks(),
                      &metrics_,     [this] { return EtcdHealth(); }};
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::string advertise_;  // a replica's --advertise-addr
  std::thread tick_thread_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<StateJournal> journal_;  // --state-dir; tick thread only
#ifdef MUSTER_WITH_ETCD
  std::unique_ptr<Replica> replica_;  // --etcd-endpoints
  std::atomic<Replica*> replica_view_{nullptr};
#endif

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_started_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_done_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    ServerOptions options) {
  if (options.replica.enabled()) {
#ifndef MUSTER_WITH_ETCD
    return absl::UnimplementedError(
        "--etcd-endpoints: this build has no replica support "
        "(MUSTER_WITH_ETCD=OFF)");
#else
    if (!options.state_dir.empty()) {
      return absl::InvalidArgumentError(
          "--state-dir and --etcd-endpoints exclude each other: replicas keep "
          "the state in etcd");
    }
    // One Store write is one etcd request, at most 1.5 MiB by etcd's
    // default: larger values are refused by the Store, not by etcd.
    constexpr int64_t kReplicaMaxValue = int64_t{1} << 20;
    if (options.store_limits.max_value_bytes > kReplicaMaxValue) {
      options.store_limits.max_value_bytes = kReplicaMaxValue;
    }
#endif
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  absl::Status started = impl->Start();
  if (!started.ok()) return started;
  MUSTER_LOG(DEBUG) << "rendezvous server listening on " << impl->address();
  return std::unique_ptr<RendezvousServer>(
      new RendezvousServer(std::move(impl)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() { Shutdown(); }

int RendezvousServer::port() const { return impl_->port(); }

std::string RendezvousServer::address() const { return impl_->address(); }

int RendezvousServer::http_port() const { return impl_->http_port(); }

absl::Status RendezvousServer::ReloadTls() { return impl_->ReloadTls(); }

void RendezvousServer::Shutdown(absl::Duration grace) {
  impl_->Shutdown(grace);
}

void RendezvousServer::Wait() { impl_->Wait(); }

void RendezvousServer::StandBy(const std::string& self,
                               const std::string& leader) {
  impl_->StandBy(self, leader);
}
void RendezvousServer::Lead(int64_t epoch) { impl_->Lead(epoch); }
void RendezvousServer::ConfirmLeadershipUntil(
    std::chrono::steady_clock::time_point until) {
  impl_->gate().SetValidUntil(until);
}
int64_t RendezvousServer::HeldEvents() const { return impl_->HeldEvents(); }
bool RendezvousServer::leading() const { return impl_->leading(); }
std::string RendezvousServer::ReplicaRole(std::string* leader) const {
  return impl_->ReplicaRole(leader);
}

Coordinator& RendezvousServer::coordinator() { return impl_->coordinator(); }

store::KvStore& RendezvousServer::store() { return impl_->store(); }

}  // namespace muster::rendezvous
