// RendezvousClient: the agent's side of the Session stream. A seam, so the
// agent's tests can run on an in-process fake; NewGrpcRendezvousClient is the
// real one.
#ifndef MUSTER_RENDEZVOUS_CLIENT_H_
#define MUSTER_RENDEZVOUS_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "muster/rendezvous/defaults.h"
#include "muster/rendezvous/security.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::rendezvous {

// Thread-safe: Send, Next and Close may be called from different threads.
class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;

  // Connects, opens the Session stream and sends join. Blocks up to the connect
  // timeout. Errors: UNAVAILABLE naming the endpoint when nothing answers there
  // in time.
  virtual absl::Status Start(const v1::Join& join) = 0;

  // Sends one message (a rejoin, a report, Leave). Errors: UNAVAILABLE once the
  // stream is broken.
  virtual absl::Status Send(const v1::AgentMessage& msg) = 0;

  // Waits up to `timeout` for the next message from the server.
  // Errors: DEADLINE_EXCEEDED when none came (the session goes on); otherwise
  // the session is over: UNAVAILABLE when the server went away, or the status
  // the server ended the stream with (FAILED_PRECONDITION / INVALID_ARGUMENT
  // for a refused Join, with the server's message).
  virtual absl::StatusOr<v1::ServerMessage> Next(absl::Duration timeout) = 0;

  // Tells the heartbeats which round the agent is in.
  virtual void SetRound(int64_t round) = 0;

  // Sends the next heartbeat now rather than at the end of the interval (the
  // interval then goes on from it), e.g. for a lease renewal that is needed
  // now. A session without heartbeats ignores it.
  virtual void HeartbeatNow() {}

  // Sends Leave{reason} when reason is non-empty, half-closes and ends the
  // stream; idempotent. Blocks at most about a second.
  virtual void Close(absl::string_view leave_reason) = 0;
};

struct GrpcClientOptions {
  // HOST:PORT of musterd.
  std::string endpoint;
  // How long Start waits for the server to answer.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Heartbeats are sent this often while the stream is open, or less often
  // when following the server's heartbeat budget (below).
  absl::Duration heartbeat_interval = absl::Milliseconds(250);
  // The heartbeat budget (muster/rendezvous/heartbeat_budget.h): when set,
  // the interval becomes FollowedHeartbeatInterval(heartbeat_interval, lease,
  // the interval the server last suggested in Waiting, RoundReady or
  // LeaseRenewed). The agent sets it unless the user set keep_alive_interval.
  bool follow_server_heartbeat_interval = false;
  absl::Duration lease = kDefaultLease;
  // TLS and the job token (sent on every call). Default: plaintext, none.
  ClientSecurity security = {};
  // Lease fencing (agent/src/lease_fence.h), both optional. lease_seq gives
  // the seq of the Join and of each heartbeat just before it is written;
  // on_lease_renewed is called on the reader thread with the seq of each
  // LeaseRenewed (which Next never returns), and with a RoundReady's
  // lease_seq before Next returns that RoundReady. Must not block.
  std::function<int64_t()> lease_seq;
  std::function<void(int64_t seq)> on_lease_renewed;
};

// Asks the server at `endpoint` (HOST:PORT) for its jobs (all when job_id is
// empty), for `muster status`: follows GetStatus's pages (page_size jobs each,
// 0: the server's default) and returns them all in one response, with the
// server's total_jobs and no next_page_token. Blocks up to `timeout` to
// connect and up to `timeout` for each page. Errors: INVALID_ARGUMENT
// for a malformed endpoint; UNAVAILABLE naming the endpoint and the cause when
// it cannot be reached.
absl::StatusOr<v1::GetStatusResponse> QueryStatus(const std::string& endpoint,
                                                  const std::string& job_id,
                                                  absl::Duration timeout);
// The same over TLS and/or with a token (a job's, or the admin's). Errors as
// above, plus UNAUTHENTICATED / PERMISSION_DENIED for a job the token does not
// open, and UNAVAILABLE naming TLS for a plaintext/TLS mismatch.
absl::StatusOr<v1::GetStatusResponse> QueryStatus(
    const std::string& endpoint, const std::string& job_id,
    absl::Duration timeout, const ClientSecurity& security, int page_size = 0);

std::unique_ptr<RendezvousClient> NewGrpcRendezvousClient(
    GrpcClientOptions options);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_CLIENT_H_
