// The gRPC server of the in-process rendezvous's Store service (the workers of
// a --standalone job bootstrap through it), on 127.0.0.1 at an ephemeral
// port. How it listens is the OS's part:
//   Linux   (local_store_server_fd.cc): a LoopbackListener whose
//           connections are handed to gRPC (AddInsecureChannelFromFd); the
//           gRPC server is built only when the first worker connects, so a
//           job whose workers never use the Store does not pay for it.
//   Windows (local_store_server_port.cc): gRPC takes no
//           descriptors there, so the gRPC server listens on 127.0.0.1:0
//           itself, from the start.
#ifndef MUSTER_RENDEZVOUS_SRC_LOCAL_STORE_SERVER_H_
#define MUSTER_RENDEZVOUS_SRC_LOCAL_STORE_SERVER_H_

#include <grpcpp/server_builder.h>

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace muster::rendezvous {

// Thread-safe.
class LocalStoreServer {
 public:
  // Registers the service and channel arguments on a builder; called once,
  // when the gRPC server is built (on Linux on the accepting thread).
  using Configure = std::function<void(grpc::ServerBuilder&)>;

  // Listens on 127.0.0.1 and an ephemeral port. Errors: UNAVAILABLE with the
  // OS's (or gRPC's) reason when nothing can listen there.
  static absl::StatusOr<std::unique_ptr<LocalStoreServer>> Start(
      Configure configure);
  virtual ~LocalStoreServer() = default;

  virtual int port() const = 0;
  // Whether the gRPC server runs (on Linux: a worker has connected).
  virtual bool started() const = 0;
  // Stops listening and shuts the gRPC server down; calls still running at
  // `deadline` are cancelled. Blocks until then at most. Idempotent.
  virtual void Shutdown(absl::Time deadline) = 0;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_LOCAL_STORE_SERVER_H_
