// QueryStatus: the GetStatus calls behind `muster status`, page by page.
#include <grpcpp/client_context.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/net.h"
#include "muster/common/status.h"
#include "muster/rendezvous/client.h"
#include "muster/store/grpc_status.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "rendezvous/src/client/rendezvous_stub.h"

namespace muster::rendezvous {

absl::StatusOr<v1::GetStatusResponse> QueryStatus(const std::string& endpoint,
                                                  const std::string& job_id,
                                                  absl::Duration timeout) {
  return QueryStatus(endpoint, job_id, timeout, store::ClientSecurity());
}

namespace {

// One server's status, all pages. `leader`: the leader a standby named when
// it refused (muster-leader), else unchanged.
absl::StatusOr<v1::GetStatusResponse> QueryOne(
    const HostPort& target, const std::string& job_id, absl::Duration timeout,
    const store::ClientSecurity& security, int page_size, std::string* leader) {
  MUSTER_ASSIGN_OR_RETURN(std::unique_ptr<v1::Rendezvous::Stub> stub,
                          ConnectRendezvous(target, security, timeout));
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
    absl::Status s =
        store::FromGrpcStatus(stub->GetStatus(&context, request, &page));
    if (!s.ok()) {
      if (s.code() == absl::StatusCode::kUnavailable)
        *leader = store::LeaderFromTrailers(context);
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

}  // namespace

absl::StatusOr<v1::GetStatusResponse> QueryStatus(
    const std::string& endpoint, const std::string& job_id,
    absl::Duration timeout, const store::ClientSecurity& security,
    int page_size) {
  MUSTER_ASSIGN_OR_RETURN(std::vector<HostPort> replicas,
                          ParseHostPortList(endpoint, 29400));
  std::string leader;
  std::vector<std::string> queue;
  std::vector<std::string> tried;
  std::vector<std::string> why;
  if (replicas.size() == 1) {
    absl::StatusOr<v1::GetStatusResponse> one =
        QueryOne(replicas[0], job_id, timeout, security, page_size, &leader);
    // One musterd answers for itself; a standby's refusal names the leader,
    // which is asked next.
    if (one.ok() || leader.empty()) return one;
    tried.push_back(replicas[0].ToString());
    why.push_back(std::string(one.status().message()));
    queue.push_back(leader);
  } else {
    // Replicas: the leader answers; a standby names it (tried next), and one
    // that cannot be reached sends the query to the next in the list.
    for (const HostPort& r : replicas) queue.push_back(r.ToString());
  }
  while (!queue.empty()) {
    const std::string replica = queue.front();
    queue.erase(queue.begin());
    if (std::find(tried.begin(), tried.end(), replica) != tried.end()) continue;
    tried.push_back(replica);
    absl::StatusOr<HostPort> target = ParseHostPort(replica, 29400);
    if (!target.ok()) {  // a leader's advertised address that does not parse
      why.push_back(absl::StrCat(replica, ": ", target.status().message()));
      continue;
    }
    leader.clear();
    absl::StatusOr<v1::GetStatusResponse> status =
        QueryOne(*target, job_id, timeout, security, page_size, &leader);
    if (status.ok()) return status;
    // Only unreachable or standby replicas send it on; a wrong token or a
    // bad request would be refused by every replica alike.
    if (status.status().code() != absl::StatusCode::kUnavailable &&
        status.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return status;
    }
    why.push_back(std::string(status.status().message()));
    if (!leader.empty()) queue.insert(queue.begin(), leader);
  }
  return absl::UnavailableError(
      absl::StrCat("no replica of ", endpoint,
                   " answered as the leader: ", absl::StrJoin(why, "; ")));
}

}  // namespace muster::rendezvous
