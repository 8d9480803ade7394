// QueryStatus: the GetStatus calls behind `muster status`, page by page.
#include <grpcpp/client_context.h>

#include <utility>

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
    absl::Duration timeout, const ClientSecurity& security, int page_size) {
  MUSTER_ASSIGN_OR_RETURN(HostPort target, ParseHostPort(endpoint, 29400));
  MUSTER_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                          NewSecureMusterChannel(target, security));
  MUSTER_RETURN_IF_ERROR(WaitForChannel(*channel, target, "rendezvous server",
                                        timeout, ChannelWait::kFailFast,
                                        security.tls()));
  auto stub = v1::Rendezvous::NewStub(channel);
  v1::GetStatusRequest request;
  request.set_job_id(job_id);
  request.set_page_size(page_size);
  v1::GetStatusResponse all;
  // Each page starts after the last job of the one before, so the tokens only
  // grow; a server that repeats one would loop forever: refuse it.
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::GetStatusResponse page;
    absl::Status s = FromGrpcStatus(stub->GetStatus(&context, request, &page));
    if (!s.ok()) {
      return Annotate(s, absl::StrCat("status from ", target.ToString()));
    }
    if (all.server_version().empty())
      all.set_server_version(page.server_version());
    all.set_total_jobs(page.total_jobs());
    for (v1::JobStatus& job : *page.mutable_jobs()) {
      *all.add_jobs() = std::move(job);
    }
    if (page.next_page_token().empty()) break;
    if (page.next_page_token() == request.page_token()) {
      return absl::InternalError(absl::StrCat(
          "status from ", target.ToString(),
          ": the server gave the same page token twice; upgrade musterd"));
    }
    request.set_page_token(page.next_page_token());
  }
  return all;
}

}  // namespace muster::rendezvous
