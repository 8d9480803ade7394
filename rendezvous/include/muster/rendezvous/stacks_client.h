// QueryStacks: the GetStacks call behind `muster stacks`.
#ifndef MUSTER_RENDEZVOUS_STACKS_CLIENT_H_
#define MUSTER_RENDEZVOUS_STACKS_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/store/security.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::rendezvous {

// Asks musterd at `endpoint` (HOST:PORT, or replicas H1:P1,H2:P2: a standby's
// refusal sends it to the leader it names) for the stacks of every worker of
// `job_id`. musterd waits up to `gather` for the agents; the call waits up to
// `connect` to connect and `gather` plus 5 s for the answer. Errors as
// QueryStatus, and NOT_FOUND for a job musterd does not know.
absl::StatusOr<v1::GetStacksResponse> QueryStacks(
    const std::string& endpoint, const std::string& job_id,
    absl::Duration connect, absl::Duration gather,
    const store::ClientSecurity& security);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_STACKS_CLIENT_H_
