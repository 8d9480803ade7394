// QueryStatus: the one-shot GetStatus call behind `muster status`.
#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/rendezvous/client.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "rendezvous/src/grpc_security.h"
#include "rendezvous/src/grpc_status.h"

namespace muster::rendezvous {

absl::StatusOr<v1::GetStatusResponse> QueryStatus(const std::string& endpoint,
                                                  const std::string& job_id,
                                                  absl::Duration timeout) {
  return QueryStatus(endpoint, job_id, timeout, ClientSecurity());
}

absl::StatusOr<v1::GetStatusResponse> QueryStatus(
    const std::string& endpoint, const std::string& job_id,
    absl::Duration timeout, const ClientSecurity& security) {
  MUSTER_ASSIGN_OR_RETURN(HostPort target, ParseHostPort(endpoint, 29400));
  MUSTER_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                          NewSecureMusterChannel(target, security));
  MUSTER_RETURN_IF_ERROR(WaitForChannel(*channel, target, "rendezvous server",
                                        timeout, ChannelWait::kFailFast,
                                        security.tls()));
  auto stub = v1::Rendezvous::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::GetStatusRequest request;
  request.set_job_id(job_id);
  v1::GetStatusResponse response;
  absl::Status s =
      FromGrpcStatus(stub->GetStatus(&context, request, &response));
  if (!s.ok()) {
    return Annotate(s, absl::StrCat("status from ", target.ToString()));
  }
  return response;
}

}  // namespace muster::rendezvous
