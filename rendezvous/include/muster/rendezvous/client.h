// RendezvousClient: the agent's side of the Session stream. A seam, so the
// agent's tests can run on an in-process fake; NewGrpcRendezvousClient is the
// real one.
#ifndef MUSTER_RENDEZVOUS_CLIENT_H_
#define MUSTER_RENDEZVOUS_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/rendezvous/defaults.h"
#include "muster/store/security.h"
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

  // Sends `leave` when its reason is non-empty, half-closes and ends the
  // stream; idempotent. Blocks at most about a second.
  virtual void CloseWith(const v1::Leave& leave) = 0;
  // CloseWith(Leave{reason}).
  void Close(absl::string_view leave_reason) {
    v1::Leave leave;
    leave.set_reason(std::string(leave_reason));
    CloseWith(leave);
  }
};

// What one agent's successive sessions learn about musterd's replicas, kept
// across its reconnects (GrpcClientOptions::replicas): the replica that led
// last (tried first) and the one last given up for silence (tried last for a
// while: a frozen leader keeps accepting TCP connections). Thread-safe.
class ReplicaMemory {
 public:
  // The replica (HOST:PORT) that accepted the last Join, or that a standby
  // named; empty when none is known.
  void SetLeader(const std::string& endpoint);
  std::string leader() const;
  // `endpoint` went silent: try it after the others until `until`.
  void Avoid(const std::string& endpoint, absl::Time until);
  bool Avoided(const std::string& endpoint, absl::Time now) const;
  // Fencing (docs/architecture.md, "Fencing"): records a server message's
  // epoch and returns true, or returns false for an epoch older than the
  // newest seen (a deposed leader's message: ignore it). Never blocks.
  bool AcceptEpoch(int64_t epoch);
  int64_t newest_epoch() const;

 private:
  mutable absl::Mutex mu_;
  int64_t newest_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  std::string avoided_ ABSL_GUARDED_BY(mu_);
  absl::Time avoid_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// How long a session with several replicas waits without a word from the
// leader while the lease is being renewed (a RoundReady with lease_seq or a
// LeaseRenewed came, and no Restart, Waiting or verdict since) before it
// gives that replica up and tries the others: max(0.45 lease, lease/4 +
// heartbeat + lease/20). Renewals come every lease/4, each taken by the first
// heartbeat after it is due, so a healthy leader is never silent for longer
// than lease/4 + one heartbeat; the bound stays below the agent's fence (0.7
// lease after the last renewed heartbeat's send) so that the agent looks for
// the new leader well before its workers would be fenced. See
// docs/architecture.md, "Following the leader".
absl::Duration LeaderSilenceBound(absl::Duration lease,
                                  absl::Duration heartbeat);

// How many musterd replicas `endpoint` names (GrpcClientOptions::endpoint: a
// list's entries, a name with several non-loopback addresses counting as that
// many, except under TLS); 0 when it does not parse. Blocks for name
// resolution, up to 2 s a name.
int CountReplicas(const std::string& endpoint, bool tls);

struct GrpcClientOptions {
  // musterd: HOST:PORT, or replicas as a comma-separated list
  // "H1:P1,H2:P2" (every HOST:PORT of one musterd cluster; a name that
  // resolves to several addresses counts as that many replicas). With several
  // replicas the session joins the leader: a standby's refusal names it
  // (trailing metadata `muster-leader`), an unreachable replica or a standby
  // without a leader sends it to the next one, and a leader that goes silent
  // (LeaderSilenceBound) ends the session so that the agent reconnects.
  std::string endpoint;
  // How long Start waits for the server to answer. With several replicas:
  // for all of them together (each gets at most kReplicaAnswer per pass).
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
  store::ClientSecurity security = {};
  // Lease fencing (agent/src/lease_fence.h), both optional. lease_seq gives
  // the seq of the Join and of each heartbeat just before it is written;
  // on_lease_renewed is called on the reader thread with the seq of each
  // LeaseRenewed (which Next never returns), and with a RoundReady's
  // lease_seq before Next returns that RoundReady. Must not block.
  std::function<int64_t()> lease_seq;
  std::function<void(int64_t seq)> on_lease_renewed;
  // `muster stacks`: reads this agent's workers' stacks for a CaptureStacks
  // (which Next never returns). Runs on a thread of the session's own, one
  // at a time, and may block up to the request's timeout_ms; the session
  // sends what it returns. Null: the agent answers that it cannot.
  std::function<v1::StacksReport(const v1::CaptureStacks&)> on_capture_stacks;
  // The progress watch (--worker-timeout): adds this node's workers' progress
  // to each heartbeat (Heartbeat.progress_age_ms) just before it is written,
  // on the heartbeat thread. Must not block for long. Null: none.
  std::function<void(v1::Heartbeat*)> fill_heartbeat;
  // Kept across the sessions of one agent (see ReplicaMemory); null: each
  // session starts afresh.
  std::shared_ptr<ReplicaMemory> replicas;
};

// Asks the server at `endpoint` (HOST:PORT, or replicas as in
// GrpcClientOptions::endpoint: a standby's refusal sends it to the leader it
// names, an unreachable replica to the next) for its jobs (all when job_id is
// empty), for `muster status`: follows GetStatus's pages (page_size jobs each,
// 0: the server's default) and returns them all in one response, with the
// server's total_jobs and no next_page_token. Blocks up to `timeout` to
// connect and up to `timeout` for each page. Errors: INVALID_ARGUMENT
// for a malformed endpoint; UNAVAILABLE naming the endpoint and the cause when
// it cannot be reached (with replicas: every replica tried and why).
absl::StatusOr<v1::GetStatusResponse> QueryStatus(const std::string& endpoint,
                                                  const std::string& job_id,
                                                  absl::Duration timeout);
// The same over TLS and/or with a token (a job's, or the admin's). Errors as
// above, plus UNAUTHENTICATED / PERMISSION_DENIED for a job the token does not
// open, and UNAVAILABLE naming TLS for a plaintext/TLS mismatch.
absl::StatusOr<v1::GetStatusResponse> QueryStatus(
    const std::string& endpoint, const std::string& job_id,
    absl::Duration timeout, const store::ClientSecurity& security,
    int page_size = 0);

std::unique_ptr<RendezvousClient> NewGrpcRendezvousClient(
    GrpcClientOptions options);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_CLIENT_H_
