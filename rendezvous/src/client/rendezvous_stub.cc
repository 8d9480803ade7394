#include "rendezvous/src/client/rendezvous_stub.h"

#include <grpcpp/channel.h>

#include "muster/common/status.h"
#include "muster/store/grpc_security.h"
#include "muster/store/grpc_status.h"

namespace muster::rendezvous {

absl::StatusOr<std::unique_ptr<v1::Rendezvous::Stub>> ConnectRendezvous(
    const HostPort& target, const store::ClientSecurity& security,
    absl::Duration connect) {
  MUSTER_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                          store::NewSecureMusterChannel(target, security));
  MUSTER_RETURN_IF_ERROR(
      store::WaitForChannel(*channel, target, "rendezvous server", connect,
                            store::ChannelWait::kFailFast, security.tls()));
  return v1::Rendezvous::NewStub(channel);
}

}  // namespace muster::rendezvous
