// LocalStoreServer on Windows: gRPC's own listening port on 127.0.0.1:0
// (AddInsecureChannelFromFd is POSIX-only), started at once.
#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/src/local/local_store_server.h"

namespace muster::rendezvous {
namespace {

class PortStoreServer final : public LocalStoreServer {
 public:
  PortStoreServer(std::unique_ptr<grpc::Server> server, int port)
      : server_(std::move(server)), port_(port) {}
  ~PortStoreServer() override { Shutdown(absl::Now() + absl::Seconds(1)); }

  int port() const override { return port_; }
  bool started() const override { return true; }

  void Shutdown(absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    server_->Shutdown(absl::ToChronoTime(deadline));
  }

 private:
  const std::unique_ptr<grpc::Server> server_;
  const int port_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LocalStoreServer>> LocalStoreServer::Start(
    Configure configure) {
  grpc::ServerBuilder builder;
  configure(builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        "cannot listen on 127.0.0.1 (an ephemeral port): gRPC could not bind "
        "it");
  }
  return std::unique_ptr<LocalStoreServer>(
      new PortStoreServer(std::move(server), port));
}

}  // namespace muster::rendezvous
