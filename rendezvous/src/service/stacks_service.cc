// GetStacks, the handler behind `muster stacks`: thin. The caller's token
// must open the job (as GetStatus of one job); the StacksRelay asks the job's
// agents and the reactor finishes when they answered or the deadline passed.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/store/grpc_status.h"
#include "rendezvous/src/service/grpc_auth.h"
#include "rendezvous/src/service/session_service.h"

namespace muster::rendezvous {

grpc::ServerUnaryReactor* SessionService::GetStacks(
    grpc::CallbackServerContext* context, const v1::GetStacksRequest* request,
    v1::GetStacksResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (gate_ != nullptr && !gate_->serving()) {
    gate_->AddLeaderTrailer(*context);
    reactor->Finish(store::ToGrpcStatus(gate_->Check()));
    return reactor;
  }
  if (request->job_id().empty()) {
    reactor->Finish(store::ToGrpcStatus(absl::InvalidArgumentError(
        "GetStacks needs a job id (muster stacks JOB)")));
    return reactor;
  }
  if (request->timeout_ms() < 0 ||
      absl::Milliseconds(request->timeout_ms()) > kMaxStacksTimeout) {
    reactor->Finish(store::ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "GetStacks timeout_ms=", request->timeout_ms(), ": expected 0 to ",
        absl::ToInt64Milliseconds(kMaxStacksTimeout)))));
    return reactor;
  }
  if (auth_ != nullptr) {
    absl::Status allowed = auth_->Check(CredentialOf(*context), Access::kStatus,
                                        request->job_id());
    if (!allowed.ok()) {
      reactor->Finish(store::ToGrpcStatus(allowed));
      return reactor;
    }
  }
  // The round's members, so that one whose session is gone is named too.
  StatusPageQuery query;
  query.job_id = request->job_id();
  v1::GetStatusResponse status = coordinator_->StatusPage(query);
  if (status.jobs_size() == 0) {
    reactor->Finish(store::ToGrpcStatus(absl::NotFoundError(
        absl::StrCat("musterd knows no job '", request->job_id(), "'"))));
    return reactor;
  }
  std::vector<std::pair<std::string, std::string>> members;
  for (const v1::Peer& p : status.jobs(0).members())
    members.emplace_back(p.hostname(), p.node_id());
  const absl::Duration timeout =
      request->timeout_ms() == 0 ? kDefaultStacksTimeout
                                 : absl::Milliseconds(request->timeout_ms());
  stacks_.Gather(request->job_id(), members, timeout,
                 [reactor, response](v1::GetStacksResponse gathered) {
                   *response = std::move(gathered);
                   response->set_server_version(MUSTER_VERSION);
                   reactor->Finish(grpc::Status::OK);
                 });
  return reactor;
}

}  // namespace muster::rendezvous
