// LocalStoreServer on Linux: connections accepted on a LoopbackListener and
// handed to a gRPC server started on the first of them.
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>

#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "rendezvous/src/local/local_store_server.h"
#include "rendezvous/src/local/loopback_listener.h"

namespace muster::rendezvous {
namespace {

class FdStoreServer final : public LocalStoreServer {
 public:
  FdStoreServer(std::unique_ptr<LoopbackListener> listener, Configure configure)
      : listener_(std::move(listener)), configure_(std::move(configure)) {
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FdStoreServer() override { Shutdown(absl::Now() + absl::Seconds(1)); }

  int port() const override { return listener_->port(); }

  bool started() const override {
    absl::MutexLock lock(&mu_);
    return server_ != nullptr;
  }

  void Shutdown(absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    listener_->Wake();
    if (accept_thread_.joinable()) accept_thread_.join();
    // No thread starts a server any more: server_ is read without the lock.
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(deadline));
  }

 private:
  // Hands every connection to the gRPC server, starting it on the first.
  void AcceptLoop() {
    while (true) {
      const int fd = listener_->Accept();
      if (fd < 0) return;
      grpc::Server* server = EnsureServer();
      if (server == nullptr) {
        LoopbackListener::CloseConnection(fd);
        continue;
      }
      grpc::AddInsecureChannelFromFd(server, fd);
    }
  }

  grpc::Server* EnsureServer() {
    absl::MutexLock lock(&mu_);
    if (server_ != nullptr || stopping_) return server_.get();
    const absl::Time start = absl::Now();
    grpc::ServerBuilder builder;
    configure_(builder);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) {
      MUSTER_LOG(ERROR) << "the workers' store service could not start";
      return nullptr;
    }
    MUSTER_LOG(DEBUG) << "a worker connected: the store service started in "
                      << absl::FormatDuration(absl::Now() - start);
    return server_.get();
  }

  const std::unique_ptr<LoopbackListener> listener_;
  const Configure configure_;
  std::thread accept_thread_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Server> server_;  // Set under mu_, once.
};

}  // namespace

absl::StatusOr<std::unique_ptr<LocalStoreServer>> LocalStoreServer::Start(
    Configure configure) {
  auto listener = LoopbackListener::Open();
  if (!listener.ok()) return listener.status();
  return std::unique_ptr<LocalStoreServer>(
      new FdStoreServer(*std::move(listener), std::move(configure)));
}

}  // namespace muster::rendezvous
