// The init methods whose store is musterd's Store service over gRPC: env://
// (the launcher's store, or without the launcher one rank 0 serves at
// MASTER_ADDR:MASTER_PORT) and tcp://HOST:PORT (rank 0 serves it). The one
// place in libmuster_comm that knows the gRPC store and serves one
// (store::StoreServer: the Store service alone, no rendezvous).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/src/environment.h"
#include "comm/store/store_factory.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/store/grpc_store.h"
#include "muster/store/security.h"
#include "muster/store/served_store.h"

namespace muster::comm::internal {
namespace {

// The namespace of the store rank 0 serves for tcp:// and env:// without the
// launcher.
constexpr char kServedPrefix[] = "muster_comm_init";

// A store that owns the server it talks to (rank 0 of tcp:// and of env://
// without the launcher): the server lives as long as rank 0's communicators.
class ServedStore final : public store::Store {
 public:
  ServedStore(std::unique_ptr<store::StoreServer> server,
              std::unique_ptr<store::Store> client)
      : server_(std::move(server)), client_(std::move(client)) {}
  ~ServedStore() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown(absl::Milliseconds(200));
  }
  absl::Status Set(absl::string_view k, absl::string_view v) override {
    return client_->Set(k, v);
  }
  absl::StatusOr<std::string> Get(absl::string_view k,
                                  absl::Duration t) override {
    return client_->Get(k, t);
  }
  absl::StatusOr<int64_t> Add(absl::string_view k, int64_t d) override {
    return client_->Add(k, d);
  }
  absl::StatusOr<std::string> CompareSet(absl::string_view k,
                                         absl::string_view e,
                                         absl::string_view d) override {
    return client_->CompareSet(k, e, d);
  }
  absl::Status Wait(absl::Span<const std::string> k,
                    absl::Duration t) override {
    return client_->Wait(k, t);
  }
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> k, absl::Duration t) override {
    return client_->MultiGet(k, t);
  }
  absl::Status MultiSet(absl::Span<const std::string> k,
                        absl::Span<const std::string> v) override {
    return client_->MultiSet(k, v);
  }
  absl::StatusOr<bool> Delete(absl::string_view k) override {
    return client_->Delete(k);
  }
  absl::StatusOr<int64_t> NumKeys() override { return client_->NumKeys(); }

 private:
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::Store> client_;
};

// Rank 0 serves the store on `where.port` (all interfaces); every rank (rank
// 0 too) talks to where.
absl::StatusOr<std::shared_ptr<store::Store>> ServedTcpStore(
    const HostPort& where, int rank, absl::Duration timeout) {
  std::unique_ptr<store::StoreServer> server;
  if (rank == 0) {
    store::StoreServerOptions server_options;
    server_options.listen = absl::StrCat("0.0.0.0:", where.port);
    absl::StatusOr<std::unique_ptr<store::StoreServer>> started =
        store::StoreServer::Start(server_options);
    if (!started.ok()) {
      return Annotate(
          started.status(),
          absl::StrCat("rank 0 serving the store on port ", where.port));
    }
    server = std::move(*started);
  }
  store::GrpcStoreOptions store_options;
  store_options.endpoint = where.ToString();
  store_options.prefix = kServedPrefix;
  // The other ranks may start before rank 0 serves: wait as long as joining
  // may take.
  store_options.connect_timeout = timeout;
  store_options.repeat_sets_in_flight = true;  // one writer per key
  absl::StatusOr<std::unique_ptr<store::Store>> client =
      store::NewGrpcStore(store_options);
  if (!client.ok()) {
    return Annotate(client.status(),
                    absl::StrCat("rank ", rank, ": connecting to the store at ",
                                 where.ToString()));
  }
  if (server == nullptr) {
    return std::shared_ptr<store::Store>(std::move(*client));
  }
  return std::shared_ptr<store::Store>(
      std::make_shared<ServedStore>(std::move(server), std::move(*client)));
}

// A job whose rank 0 serves the store at `where`.
absl::StatusOr<JobStore> OpenServed(const HostPort& where,
                                    const StoreRequest& request) {
  JobStore job;
  job.rank = request.rank;
  job.world_size = request.world_size;
  MUSTER_RETURN_IF_ERROR(ResolveRankAndSize(job.rank, job.world_size));
  MUSTER_ASSIGN_OR_RETURN(job.store,
                          ServedTcpStore(where, job.rank, request.timeout));
  job.all_local = EnvironmentSaysAllLocal(job.world_size);
  return job;
}

class EnvStoreFactory final : public StoreFactory {
 public:
  std::string scheme() const override { return "env"; }
  std::string usage() const override { return "env://"; }

  absl::StatusOr<JobStore> Open(const StoreRequest& request) const override {
    if (!request.address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "init method env:// takes nothing after the scheme, not '",
          request.address, "'"));
    }
    // Under muster: the launcher's store, ranks and sizes.
    if (GetEnv("MUSTER_STORE_ENDPOINT") != nullptr) return OpenLauncherStore();
    constexpr char kMasterHow[] =
        "init method env:// without the launcher needs MASTER_ADDR and "
        "MASTER_PORT (rank 0 serves the store there), RANK and WORLD_SIZE";
    const char* addr = GetEnv("MASTER_ADDR");
    if (addr == nullptr) return MissingVariable("MASTER_ADDR", kMasterHow);
    MUSTER_ASSIGN_OR_RETURN(int port, RequiredInt("MASTER_PORT", kMasterHow));
    return OpenServed(HostPort{addr, port}, request);
  }
};

class TcpStoreFactory final : public StoreFactory {
 public:
  std::string scheme() const override { return "tcp"; }
  std::string usage() const override { return "tcp://HOST:PORT"; }

  absl::StatusOr<JobStore> Open(const StoreRequest& request) const override {
    absl::StatusOr<HostPort> where = ParseHostPort(request.address, -1);
    if (!where.ok() || where->host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "init method tcp://", request.address,
          ": expected tcp://HOST:PORT (rank 0 serves the store on PORT)"));
    }
    return OpenServed(*where, request);
  }
};

}  // namespace

absl::StatusOr<JobStore> OpenLauncherStore() {
  constexpr char kLauncherHow[] =
      "Communicator::FromEnvironment joins the job through the launcher's "
      "environment";
  JobStore job;
  MUSTER_ASSIGN_OR_RETURN(job.rank, RequiredInt("RANK", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(job.world_size,
                          RequiredInt("WORLD_SIZE", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(int local_world_size,
                          RequiredInt("LOCAL_WORLD_SIZE", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(
      std::string endpoint,
      RequiredString("MUSTER_STORE_ENDPOINT", kLauncherHow));
  MUSTER_ASSIGN_OR_RETURN(std::string prefix,
                          RequiredString("MUSTER_STORE_PREFIX", kLauncherHow));
  if (job.world_size < 1 || job.rank < 0 || job.rank >= job.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment: RANK=", job.rank,
                     " is outside [0, WORLD_SIZE=", job.world_size, ")"));
  }
  if (local_world_size < 1 || local_world_size > job.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment: LOCAL_WORLD_SIZE=", local_world_size,
                     " is outside [1, WORLD_SIZE=", job.world_size, "]"));
  }
  store::GrpcStoreOptions store_options;
  // HOST:PORT, or every musterd replica's, comma-separated (H1:P1,H2:P2):
  // passed through as it is; NewGrpcStore validates it (naming the forms it
  // takes) and finds the leader among the replicas.
  store_options.endpoint = endpoint;
  store_options.prefix = prefix;
  // The round's Store credential and TLS settings the agent gave this worker
  // (MUSTER_STORE_TOKEN, MUSTER_STORE_TLS_*); none against a plain musterd.
  store_options.security = store::StoreSecurityFromEnv();
  // Each key the library writes has one writer (a rank's address, a NCCL
  // id): a Set in flight across a musterd failover is written again, and the
  // worker sees a slow call, not an error.
  store_options.repeat_sets_in_flight = true;
  absl::StatusOr<std::unique_ptr<store::Store>> store =
      store::NewGrpcStore(store_options);
  if (!store.ok()) {
    return Annotate(
        store.status(),
        absl::StrCat("connecting to the store at MUSTER_STORE_ENDPOINT=",
                     endpoint));
  }
  job.store = std::shared_ptr<store::Store>(std::move(*store));
  job.all_local = local_world_size == job.world_size;
  return job;
}

std::unique_ptr<StoreFactory> NewEnvStoreFactory() {
  return std::make_unique<EnvStoreFactory>();
}

std::unique_ptr<StoreFactory> NewTcpStoreFactory() {
  return std::make_unique<TcpStoreFactory>();
}

}  // namespace muster::comm::internal
