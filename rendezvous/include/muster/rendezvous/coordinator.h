// The Coordinator: musterd's rendezvous state machine for many jobs. It holds
// no gRPC: the Session adapter feeds it events from streams and it answers
// through AgentChannel, so tests drive it with fake channels and a FakeClock.
//
// One job's lifecycle (transitions live in
// rendezvous/src/core/coordinator_*.cc, one function per transition, each
// changing the state through Impl::Transition; the event handlers decide which
// applies). A job is OPEN (a round forms), RUNNING, SUCCEEDED or FAILED
// (JobState). The transitions, with the events that make them and a re-adopted
// round's ADOPTING (shown as OPEN), are drawn in
// rendezvous/src/core/job_phase.h from the table every state change is checked
// against (job_phase.cc).
//
// Entering OPEN begins a new round (numbers increase from 1 and go on across
// reruns); the round's store namespace is "<job>/<round>", and the namespace
// of a round that ended is dropped through on_round_end. An ended job
// (SUCCEEDED or FAILED) is forgotten after finished_job_retention once its last
// agent disconnected; an OPEN job whose last agent left, at the next Tick.
//
// Rank rules: survivors of the previous round keep their group order; newcomers
// follow in join order; node_rank_hint (static mode) wins where given. Global
// rank offsets are prefix sums of local_world_size. The master is group rank
// 0's advertised address and reserved port.
//
// A worker failure costs one restart (restart_count + 1, reported to workers as
// TORCHELASTIC_RESTART_COUNT); a lost agent or a newcomer costs none. With no
// restarts left, or fewer than min_nodes when join_timeout passes, every agent
// gets JobFailed with the root cause. A newcomer waits as a spare instead of
// scaling up when the round is at max, or once a member has reported success
// (the round is finishing: nothing reruns).
//
// An agent that reconnects with its node id keeps its place in the running
// round (RoundReady is sent again); one that missed the job's verdict hears it
// again. A preflight report of an unreachable peer fails the job at once.
//
// Once a job has ended and none of its agents is connected, a new Join with its
// id starts the job afresh (a long-lived musterd does not refuse a rerun of the
// same command).
//
// Costs at scale: a join, a heartbeat and a lost agent's detection cost O(1)
// (amortised, log n at most) whatever the job's size: Waiting updates are
// coalesced above 64 waiting agents, heartbeat deadlines sit in a lazy
// deadline queue (no scan per tick), and above 64 nodes a RoundReady lists only
// the peers the agent probes (RoundReady.peers_partial). A round's formation
// and end cost O(n) messages, as they must.
//
// Thread-safe: one mutex for the state machine; a heartbeat takes none of it
// (it moves its connection's last-seen time in a sharded table), so heartbeats
// never wait for a round forming or a Tick, and Tick wakes for heartbeat
// deadlines on a 50 ms grid (a lost agent is found at most 50 ms late).
// AgentChannel calls are made after the mutex is released,
// in the order the state machine produced them (rendezvous/src/core/outbox.h),
// so no stream write holds up another event; channels must still not block nor
// call back into the Coordinator.
#ifndef MUSTER_RENDEZVOUS_COORDINATOR_H_
#define MUSTER_RENDEZVOUS_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "muster/common/logging.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/defaults.h"
#include "muster/rendezvous/heartbeat_budget.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::rendezvous {

// Identifies one Session stream; assigned by the adapter, never reused within a
// process.
using ConnectionId = uint64_t;

// The way back to one agent. Implemented by the gRPC Session stream
// (SessionStream, rendezvous/src/service/session_stream.h) and by fakes in
// tests.
class AgentChannel {
 public:
  virtual ~AgentChannel() = default;
  // Queues msg for the agent. Must not block or call into the Coordinator.
  virtual void Send(const v1::ServerMessage& msg) = 0;
  // The same for a message shared with other agents (a broadcast: Restart, a
  // verdict, Waiting); msg is never changed. The default copies it into Send;
  // the Session stream keeps the pointer, so a broadcast is built once.
  virtual void SendShared(std::shared_ptr<const v1::ServerMessage> msg) {
    Send(*msg);
  }
  // Ends the stream with status (OK after JobSucceeded/JobFailed; an error for
  // a refused Join). Must not block or call into the Coordinator. Further Sends
  // are dropped.
  virtual void Close(const absl::Status& status) = 0;
};

enum class JobState { kOpen, kRunning, kSucceeded, kFailed };
absl::string_view JobStateName(JobState state);

struct CoordinatorOptions {
  // Used when a Join leaves the field 0.
  absl::Duration default_join_timeout = kDefaultJoinTimeout;
  absl::Duration default_last_call_timeout = kDefaultLastCallTimeout;
  absl::Duration default_heartbeat_timeout = absl::Seconds(2);
  // Lease fencing (rendezvous/src/core/lease.h): used when a Join leaves
  // lease_timeout_ms 0. A node that goes silent is declared lost only once
  // max(heartbeat timeout, lease) has passed since it was last heard.
  absl::Duration default_lease_timeout = kDefaultLease;
  // A musterd that restarted (or never knew the job) and hears agents claim a
  // RUNNING round (Join.claim) waits this long for every member of that
  // round to come back, and then runs it on unchanged (no worker restarts);
  // otherwise it forms the next round.
  absl::Duration adoption_grace = absl::Seconds(5);
  // A job with more than 64 waiting agents sends each of them Waiting at most
  // once per interval (and when min_nodes is reached or lost), not on every
  // join: a join then costs O(1) messages, not one per waiting agent. A
  // joining agent always hears Waiting at once. Above 10,000 waiting agents
  // the interval grows by 100 us per agent (30,000: 3 s), so that the updates
  // cost at most about 10,000 messages a second.
  absl::Duration waiting_update_interval = absl::Seconds(1);
  // The heartbeat budget (muster/rendezvous/heartbeat_budget.h): Waiting,
  // RoundReady and LeaseRenewed suggest each agent a heartbeat interval that
  // keeps all connected agents' heartbeats near this many a second (the
  // default interval up to 2,000 agents). 0: suggest none.
  int64_t heartbeat_budget_per_second = kDefaultHeartbeatBudgetPerSecond;
  // How long an ended job stays visible to GetStatus after its last agent
  // disconnected.
  absl::Duration finished_job_retention = absl::Minutes(10);
  // And at most this many ended jobs are kept (the oldest are forgotten
  // first). An OPEN job whose last agent left is forgotten at once.
  int max_finished_jobs = 1000;
  // Called (under the Coordinator's lock; must not call back) when a round ends
  // and its store namespace may be dropped, and with "<job>/" when a job is
  // forgotten.
  std::function<void(const std::string& store_prefix)> on_round_end;
  // Fills the Store's use of a round's namespace for one-job status answers
  // (JobStatus.store); under the Coordinator's lock, must not call back.
  // Unset: no store field.
  std::function<void(const std::string& store_prefix, v1::StoreUsage* usage)>
      store_usage;
  // The level of the job and round events it logs (new, open, joined, ready,
  // lost, verdict). An agent that embeds the server for its own single node
  // lowers it to kDebug: it prints the same events from its side.
  LogLevel event_log_level = LogLevel::kInfo;
};

// Which jobs one GetStatus page lists (Coordinator::StatusPage).
struct StatusPageQuery {
  // Only this job when not empty.
  std::string job_id;
  // Jobs whose id sorts after this one; empty: from the first.
  std::string after;
  // At most this many jobs, and at most about this many bytes of them.
  int page_size = 1000;
  int64_t max_bytes = int64_t{1} << 20;
  // Whether the caller may see a job (null: every job). Jobs it may not see
  // are neither listed nor counted. Called under the Coordinator's lock: must
  // not call into the Coordinator.
  std::function<bool(absl::string_view job_id)> visible;
};

class Coordinator {
 public:
  // clock must outlive the Coordinator.
  Coordinator(CoordinatorOptions options, Clock* clock);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // A Join on stream conn (the first message, or a rejoin after Restart). On
  // success the agent is queued for the job's open round and may get
  // Waiting/RoundReady through channel at once. Errors (the adapter ends the
  // stream with them): INVALID_ARGUMENT for a malformed Join (empty job or node
  // id, local_world_size < 1, min < 1, max < min), FAILED_PRECONDITION when the
  // job exists with other min/max/max_restarts, UNAVAILABLE (retry shortly)
  // when it has ended and still has agents connected. The message names the
  // field, both values and the fix.
  absl::Status OnJoin(ConnectionId conn, const v1::Join& join,
                      std::shared_ptr<AgentChannel> channel);
  // Returns whether the adapter should answer LeaseRenewed{heartbeat.seq} now:
  // the heartbeat has a seq, the stream's node is still counted alive and its
  // last renewal is about lease/4 old (lease fencing,
  // rendezvous/src/core/lease.h). O(1), without the Coordinator's lock.
  bool OnHeartbeat(ConnectionId conn, const v1::Heartbeat& heartbeat);
  // The heartbeat interval the server suggests now (heartbeat_budget.h) for
  // the agents connected, and for conn's agent (whose job's size counts too,
  // as in its Waiting and RoundReady), for LeaseRenewed; zero when it
  // suggests none. Lock-free.
  absl::Duration SuggestedHeartbeatInterval() const;
  absl::Duration SuggestedHeartbeatInterval(ConnectionId conn) const;
  // An agent's preflight found a peer it cannot reach: the job fails at once
  // (no restart mends a firewall), naming both nodes, the port and the cause.
  // Ignored when stale.
  void OnPreflightFailed(ConnectionId conn, const v1::PreflightFailed& failed);
  // Ignored when the round is not the current one (a stale report).
  void OnWorkersFailed(ConnectionId conn, const v1::WorkersFailed& failed);
  void OnWorkersSucceeded(ConnectionId conn,
                          const v1::WorkersSucceeded& succeeded);
  // The agent leaves: same as a lost agent, with its reason in the Restart
  // message.
  void OnLeave(ConnectionId conn, const v1::Leave& leave);
  // The stream ended (agent died, network cut, cancelled).
  void OnDisconnect(ConnectionId conn);

  // Fires what is due at clock->Now(): last-call timers, join timeouts, missed
  // heartbeats, retention of ended jobs, coalesced Waiting updates, and writes
  // out messages an event's flush left (rendezvous/src/core/outbox.h). Returns
  // the earliest time something is next due (absl::InfiniteFuture() when
  // nothing is). The server calls it at least that often, and at least every
  // ServerOptions::tick_interval.
  absl::Time Tick();

  // Hands every queued message to its channel now, after any delivery under
  // way (no quota). The server calls it before it closes every stream at
  // shutdown, so a verdict already decided reaches every agent.
  void DrainOutbox();

  // A restarted musterd's journal (--state-dir) names a job it ran, with its
  // round and restart count. When the job's first agent comes back, the job
  // goes on from them: its claim may be older (an agent between rounds claims
  // the round it last ran), and a restart count from it would give back the
  // restarts used since (found by tests/e2e/chaos_e2e_test.cc). A re-adopted
  // round keeps its claimed restart count (its workers run with it).
  void ResumeJob(const std::string& job_id, int64_t round,
                 int32_t restart_count);

  // Replicas (docs/architecture.md, "Fencing"): every message built from now
  // on carries `epoch`, the leadership's election revision. Set once, before
  // this musterd serves as the leader. Thread-safe.
  void SetEpoch(int64_t epoch);

  // The leadership was confirmed again after a lapse (etcd slow, or this
  // process paused): what the agents sent meanwhile was held, not heard, so
  // every connection counts as heard from now and no node is declared silent
  // by a clock that ran while this musterd could not listen or act. An agent
  // that is really gone is lost one heartbeat timeout later.
  void ForgiveSilence();

  // Jobs (all when job_id is empty), for `muster status`.
  v1::GetStatusResponse Status(absl::string_view job_id) const;
  // One page of them (GetStatus; the request is parsed by status_page.h):
  // jobs in the order of their ids, after query.after, at most
  // query.page_size of them and about query.max_bytes (a job too large alone
  // has its last members and waiting agents left out, counted in
  // members_omitted / waiting_omitted). Sets total_jobs and, when more jobs
  // follow, next_page_token. O(jobs) under the lock.
  v1::GetStatusResponse StatusPage(const StatusPageQuery& query) const;

  // Counters for metrics and tests.
  int64_t ConnectedAgents() const;
  int64_t JobCount() const;
  // Since the start: Joins accepted and rounds made ready (the console's
  // rates). Lock-free.
  int64_t JoinsAccepted() const;
  int64_t RoundsReady() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_COORDINATOR_H_
