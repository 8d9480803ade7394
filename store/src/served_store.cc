#include "muster/store/served_store.h"

#include <grpcpp/grpcpp.h>

#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "muster/store/store_service.h"

namespace muster::store {

void AddMusterServerArguments(grpc::ServerBuilder& builder) {
  // gRPC sets SO_REUSEPORT by default, which lets a second server share the
  // port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients ping every 10 s (NewMusterChannel) to notice a cut network; allow
  // it.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // No bandwidth-delay probing: every message here is small, and its pings
  // (one per burst of reads on each connection) cost 10,000 heartbeating
  // agents a syscall pair per burst for nothing.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
}

// Why binding `where` failed, as far as we can tell.
std::string DescribeBindFailure(const HostPort& where) {
  std::string prefix =
      absl::StrCat("cannot listen on ", where.ToString(), ": ");
  if (where.port != 0) {
    std::string owner = DescribePortOwner(where.port);
    if (!owner.empty()) {
      return absl::StrCat(prefix, "the port is in use by ", owner,
                          " — stop it, or pick another port with --listen");
    }
    std::string probe_host = (where.host == "0.0.0.0" || where.host == "::")
                                 ? "127.0.0.1"
                                 : where.host;
    if (CanConnect(probe_host, where.port, absl::Milliseconds(200))) {
      return absl::StrCat(
          prefix,
          "the port is in use by another process (not one this user can see)"
          " — stop it, or pick another port with --listen");
    }
  }
  if (where.port == 0) {
    return absl::StrCat(prefix, "is the address on this host? (", where.host,
                        " is not an address of this machine's interfaces)");
  }
  return absl::StrCat(
      prefix, "is the address on this host? (", where.host,
      " is not an address of this machine's interfaces, or the port is taken)");
}

class StoreServer::Impl {
 public:
  explicit Impl(KvStoreLimits limits) : store_(limits), service_(&store_) {}
  ~Impl() { Shutdown(absl::Seconds(1)); }

  absl::Status Start(const std::string& listen) {
    absl::StatusOr<HostPort> where =
        ParseHostPort(listen, -1, /*allow_zero_port=*/true);
    if (!where.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad listen address: ", where.status().message()));
    }
    if (where->host.empty()) where->host = "0.0.0.0";
    grpc::ServerBuilder builder;
    AddMusterServerArguments(builder);
    int bound_port = 0;
    builder.AddListeningPort(where->ToString(),
                             grpc::InsecureServerCredentials(), &bound_port);
    builder.RegisterService(service_.service());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || bound_port == 0) {
      if (server_ != nullptr)
        server_->Shutdown(absl::ToChronoTime(absl::Now()));
      server_.reset();
      return absl::UnavailableError(DescribeBindFailure(*where));
    }
    port_ = bound_port;
    return absl::OkStatus();
  }

  int port() const { return port_; }

  void Shutdown(absl::Duration grace) {
    std::call_once(shutdown_once_, [&] {
      service_.Shutdown(absl::UnavailableError("the store is shutting down"));
      if (server_ != nullptr) {
        server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
      }
    });
  }

 private:
  // Declared before what uses them: destroyed after the server.
  KvStore store_;
  StoreService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreServer::~StoreServer() = default;

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(
    const StoreServerOptions& options) {
  auto impl = std::make_unique<Impl>(options.limits);
  if (absl::Status s = impl->Start(options.listen); !s.ok()) return s;
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

int StoreServer::port() const { return impl_->port(); }

void StoreServer::Shutdown(absl::Duration grace) { impl_->Shutdown(grace); }

}  // namespace muster::store
