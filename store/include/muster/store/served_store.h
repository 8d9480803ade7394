// StoreServer: a gRPC server that hosts only the Store service
// (store_service.h) over a KvStore of its own: the store a job without musterd
// bootstraps through (libmuster_comm's tcp:// and env:// without the
// launcher: rank 0 serves it). No authorization and no fencing, like
// PyTorch's TCPStore: one job's ranks on a network they trust.
//
// Also the server settings musterd shares with it.
#ifndef MUSTER_STORE_SERVED_STORE_H_
#define MUSTER_STORE_SERVED_STORE_H_

#include <grpcpp/server_builder.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/common/net.h"
#include "muster/store/kv_store.h"

namespace muster::store {

// The channel arguments of every muster gRPC server: no shared port
// (SO_REUSEPORT off), the clients' keepalive pings allowed, no
// bandwidth-delay probing.
void AddMusterServerArguments(grpc::ServerBuilder& builder);

// Why binding `where` failed, as far as a probe can tell (the port's owner,
// another user's process, an address of another host), with the fix.
std::string DescribeBindFailure(const HostPort& where);

struct StoreServerOptions {
  // HOST:PORT to listen on; HOST empty: every interface; port 0: one the OS
  // picks (port() says which).
  std::string listen;
  // The key-value engine's bounds.
  KvStoreLimits limits = {};
};

// Thread-safe.
class StoreServer {
 public:
  // Listens and serves. Errors: INVALID_ARGUMENT for a malformed listen
  // address; UNAVAILABLE with DescribeBindFailure's reason when nothing can
  // listen there.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(
      const StoreServerOptions& options);
  // Shutdown(1 s).
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Ends every pending wait and stream with UNAVAILABLE and stops the server;
  // calls still running after `grace` are cancelled. Blocks up to `grace`.
  // Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  class Impl;
  explicit StoreServer(std::unique_ptr<Impl> impl);
  const std::unique_ptr<Impl> impl_;
};

}  // namespace muster::store

#endif  // MUSTER_STORE_SERVED_STORE_H_
