#include "muster/rendezvous/stacks_client.h"

#include <grpcpp/client_context.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/store/grpc_status.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "rendezvous/src/client/rendezvous_stub.h"

namespace muster::rendezvous {
namespace {

absl::StatusOr<v1::GetStacksResponse> AskOne(
    const HostPort& target, const std::string& job_id, absl::Duration connect,
    absl::Duration gather, const store::ClientSecurity& security,
    std::string* leader) {
  MUSTER_ASSIGN_OR_RETURN(std::unique_ptr<v1::Rendezvous::Stub> stub,
                          ConnectRendezvous(target, security, connect));
  v1::GetStacksRequest request;
  request.set_job_id(job_id);
  request.set_timeout_ms(absl::ToInt64Milliseconds(gather));
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + gather + absl::Seconds(5)));
  v1::GetStacksResponse response;
  absl::Status s =
      store::FromGrpcStatus(stub->GetStacks(&context, request, &response));
  if (!s.ok()) {
    if (s.code() == absl::StatusCode::kUnavailable)
      *leader = store::LeaderFromTrailers(context);
    if (s.code() == absl::StatusCode::kUnimplemented) {
      return absl::UnimplementedError(
          absl::StrCat("the musterd at ", target.ToString(),
                       " is too old for `muster stacks`: upgrade it"));
    }
    return Annotate(s, absl::StrCat("stacks from ", target.ToString()));
  }
  return response;
}

}  // namespace

absl::StatusOr<v1::GetStacksResponse> QueryStacks(
    const std::string& endpoint, const std::string& job_id,
    absl::Duration connect, absl::Duration gather,
    const store::ClientSecurity& security) {
  MUSTER_ASSIGN_OR_RETURN(std::vector<HostPort> replicas,
                          ParseHostPortList(endpoint, 29400));
  std::vector<std::string> why;
  for (const HostPort& r : replicas) {
    std::string leader;
    absl::StatusOr<v1::GetStacksResponse> answer =
        AskOne(r, job_id, connect, gather, security, &leader);
    if (answer.ok()) return answer;
    const absl::StatusCode code = answer.status().code();
    if (code != absl::StatusCode::kUnavailable &&
        code != absl::StatusCode::kDeadlineExceeded)
      return answer;
    why.push_back(std::string(answer.status().message()));
    if (!leader.empty()) {  // a standby named the leader: ask it
      absl::StatusOr<HostPort> target = ParseHostPort(leader, 29400);
      if (target.ok()) {
        std::string ignored;
        answer = AskOne(*target, job_id, connect, gather, security, &ignored);
        if (answer.ok()) return answer;
        why.push_back(std::string(answer.status().message()));
      }
    }
  }
  if (replicas.size() == 1) return absl::UnavailableError(why.front());
  return absl::UnavailableError(
      absl::StrCat("no replica of ", endpoint,
                   " answered as the leader: ", absl::StrJoin(why, "; ")));
}

}  // namespace muster::rendezvous
