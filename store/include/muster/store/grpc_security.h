// The gRPC side of muster's security (security.h configures; musterd's
// rendezvous/auth.h decides):
// the caller's credential from its metadata, client channels with TLS and the
// bearer token on every call, musterd's TLS credentials with reload, and the
// probe that names a plaintext/TLS mismatch.
#ifndef MUSTER_STORE_GRPC_SECURITY_H_
#define MUSTER_STORE_GRPC_SECURITY_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/common/net.h"
#include "muster/store/security.h"
#include "muster/store/service_hooks.h"

namespace muster::store {

// The values of the caller's `authorization` metadata (kAuthorizationHeader),
// usually one.
std::vector<std::string> AuthorizationOf(
    const grpc::ServerContextBase& context);

// A channel to `target` with muster's channel arguments (NewMusterChannel),
// TLS when security.tls(), and `authorization: Bearer TOKEN` added to every
// call when security.token is set. Errors: those of security.Validate() and
// unreadable PEM files, naming the setting.
absl::StatusOr<std::shared_ptr<grpc::Channel>> NewSecureMusterChannel(
    const HostPort& target, const ClientSecurity& security);

// When a channel to `target` fails to connect: whether the failure is a
// plaintext/TLS mismatch or a failed TLS handshake, as one sentence with the
// fix; empty when it is not (or the probe cannot tell). Blocks up to
// `timeout`.
std::string DescribeTlsMismatch(const HostPort& target, bool client_tls,
                                absl::Duration timeout);

// musterd's TLS credentials. gRPC's file-watcher provider reads private
// copies of the PEM files (in a 0700 directory of its own); Reload validates
// the operator's files again and replaces the copies, and gRPC uses them for
// every new connection within a second. Connections made before keep their
// session: no job is dropped. Thread-safe.
class ServerTlsCredentials {
 public:
  // Errors: ValidateServerTls's; INTERNAL when the private directory cannot
  // be made.
  static absl::StatusOr<std::unique_ptr<ServerTlsCredentials>> Create(
      ServerTls tls);
  ~ServerTlsCredentials();  // removes the private copies

  std::shared_ptr<grpc::ServerCredentials> credentials() const {
    return credentials_;
  }
  // Re-reads the files named at Create. On error the old certificates stay in
  // use.
  absl::Status Reload();

 private:
  ServerTlsCredentials(ServerTls tls, std::string dir);
  absl::Status CopyFiles() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServerTls tls_;
  const std::string dir_;
  absl::Mutex mu_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

}  // namespace muster::store

#endif  // MUSTER_STORE_GRPC_SECURITY_H_
