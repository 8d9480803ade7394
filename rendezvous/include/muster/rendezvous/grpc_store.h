// GrpcStore: the Store seam over musterd's Store service, bound to one round's
// namespace.
#ifndef MUSTER_RENDEZVOUS_GRPC_STORE_H_
#define MUSTER_RENDEZVOUS_GRPC_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/rendezvous/security.h"
#include "muster/rendezvous/store.h"

namespace muster::rendezvous {

struct GrpcStoreOptions {
  // HOST:PORT of musterd (MUSTER_STORE_ENDPOINT).
  std::string endpoint;
  // The round's namespace (MUSTER_STORE_PREFIX).
  std::string prefix;
  // How long the first call waits for the server to be reachable.
  absl::Duration connect_timeout = absl::Seconds(10);
  // TLS and the credential sent on every call (a worker's is its round's
  // MUSTER_STORE_TOKEN; see StoreSecurityFromEnv). Default: plaintext, none.
  ClientSecurity security = {};
};

// Connects (waiting up to connect_timeout). Errors: INVALID_ARGUMENT for an
// empty endpoint or prefix; UNAVAILABLE naming the endpoint when it cannot be
// reached. The store is thread-safe; calls that wait block the calling thread
// only.
absl::StatusOr<std::unique_ptr<Store>> NewGrpcStore(
    const GrpcStoreOptions& options);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_GRPC_STORE_H_
