// The caller's Credential (auth.h) from a gRPC call's `authorization`
// metadata, for the Session, GetStatus and stacks services.
#ifndef MUSTER_RENDEZVOUS_SRC_GRPC_AUTH_H_
#define MUSTER_RENDEZVOUS_SRC_GRPC_AUTH_H_

#include <grpcpp/server_context.h>

#include <string>
#include <vector>

#include "muster/rendezvous/auth.h"
#include "muster/store/grpc_security.h"

namespace muster::rendezvous {

inline Credential CredentialOf(const grpc::ServerContextBase& context) {
  const std::vector<std::string> values = store::AuthorizationOf(context);
  return ParseAuthorization(values.data(), static_cast<int>(values.size()));
}

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_GRPC_AUTH_H_
