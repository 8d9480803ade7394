// Private to the Coordinator's source files: its plain data (Job, Node,
// Member: serialisable in spirit, no channel pointers), the connection table
// (the only place holding channels), the Impl class and the text helpers the
// files share. Which file holds what:
//   coordinator.cc          lookups, channel I/O and the public methods
//   coordinator_join.cc     join admission: validation, new jobs and reruns,
//                           reconnects, session secrets (OnJoin)
//   coordinator_round.cc    round formation: OpenRound, AddWaiting,
//                           CheckCount, CloseRound; Waiting and RoundReady
//   coordinator_failure.cc  failure handling: EndRound, FailJob, LoseNode,
//                           worker and preflight reports, Leave, disconnects,
//                           heartbeats and their expiry, root causes
//   coordinator_jobs.cc     job lifecycle: success, verdicts, retention and
//                           forgetting, Tick's timers
//   coordinator_status.cc   the status view and counters
//   coordinator_progress.cc the progress watch (--worker-timeout): no rank of
//                           a running round progressed -> CaptureHang
//   coordinator_stragglers.cc the straggler watch: speed scores, Excluded, the
//                           exclusion cooldown
// Each state change happens in exactly one transition function; the event
// handlers decide which one applies (the diagram is in job_phase.h).
#ifndef MUSTER_RENDEZVOUS_SRC_COORDINATOR_INTERNAL_H_
#define MUSTER_RENDEZVOUS_SRC_COORDINATOR_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/rendezvous/rank_assignment.h"
#include "muster/v1/rendezvous.pb.h"
#include "rendezvous/src/core/deadline_queue.h"
#include "rendezvous/src/core/job_phase.h"
#include "rendezvous/src/core/lease.h"
#include "rendezvous/src/core/liveness_table.h"
#include "rendezvous/src/core/outbox.h"
#include "rendezvous/src/core/straggler_tracker.h"

namespace muster::rendezvous {

// ---------- text helpers shared by the files

// "600s" rather than absl's "10m": the flags and rdzv-conf are given in
// seconds.
inline std::string FormatSeconds(absl::Duration d) {
  if (d % absl::Seconds(1) == absl::ZeroDuration()) {
    return absl::StrCat(absl::ToInt64Seconds(d), "s");
  }
  return absl::FormatDuration(d);
}

inline std::string NNodesFlag(int min_nodes, int max_nodes) {
  if (min_nodes == max_nodes) return absl::StrCat("--nnodes=", min_nodes);
  return absl::StrCat("--nnodes=", min_nodes, ":", max_nodes);
}

// "node h2 [node-b]": the hostname is what people recognise, the node id what
// the logs key on.
inline std::string DescribeNode(absl::string_view hostname,
                                absl::string_view node_id) {
  if (hostname.empty() || hostname == node_id)
    return absl::StrCat("node ", node_id);
  return absl::StrCat("node ", hostname, " [", node_id, "]");
}

inline std::string StorePrefix(absl::string_view job_id, int64_t round) {
  return absl::StrCat(job_id, "/", round);
}

// Jobs with at most this many waiting agents tell each of them about every
// change at once; larger ones coalesce the updates to one per
// waiting_update_interval (and on the min_nodes threshold), so a join costs
// O(1) messages instead of one per waiting agent.
inline constexpr int kWaitingAtOnceMax = 64;

// And the interval between those updates grows with the job: at least this
// much per waiting agent (10,000 waiting: 1 s; 30,000: 3 s; 100,000: 10 s).
// A broadcast to every waiting agent once a second made a round of n agents
// that takes T seconds to gather cost n x T messages: 30,000 agents spent
// most of their 76 s forming on Waiting updates. Bounded this way, updates
// cost at most about 10,000 messages a second per job.
inline constexpr absl::Duration kWaitingUpdatePerAgent =
    absl::Microseconds(100);

inline int64_t ToUnixMillisOrZero(absl::Time t) {
  if (t == absl::InfiniteFuture() || t == absl::InfinitePast()) return 0;
  return absl::ToUnixMillis(t);
}

inline absl::Duration MillisOr(int64_t ms, absl::Duration fallback) {
  return ms > 0 ? absl::Milliseconds(ms) : fallback;
}

// ---------- plain data

// Status of a node inside a job (Node::status):
//  kPending  connected but not in the open round: a survivor after Restart
//            that has not rejoined yet, or an agent of an ended job.
//  kWaiting  in the open round's waiting set, or a spare while the round
//            runs at max_nodes.
//  kMember   a member of the RUNNING round.
enum class NodeStatus { kPending, kWaiting, kMember };

// A connected agent of a job.
struct Node {
  v1::Join join;  // the latest Join (hostname, address, port, sizes)
  ConnectionId conn = 0;
  // SHA-256 of the session secret of the node's first Join (none: an agent
  // that sent no secret). Another stream speaks for the node only with it.
  std::optional<Digest> session_digest;
  NodeStatus status = NodeStatus::kPending;
  int64_t join_seq = 0;  // when it entered the waiting set; orders newcomers
};

// A member of the RUNNING (or last) round: a snapshot taken when the round
// closed, so a later reconnect with other details cannot change what the
// round's peers were told.
struct Member {
  RankAssignment rank;
  std::string hostname;
  std::string advertised_addr;
  int32_t master_port = 0;
};

// The member's node id, host, address and ranks as a Peer (RoundReady's peers,
// GetStatus's members); not its reserved port. coordinator_status.cc.
void FillPeer(const Member& m, v1::Peer* p);

// A node excluded from a job (coordinator_stragglers.cc): its Joins to the job
// are answered with Excluded until `until`. by_host: no other agent of the job
// shared its hostname, so the exclusion holds for the machine (a new agent on
// it has a new node id); otherwise (several agents on one host, as in tests on
// loopback) for its node id only.
struct Exclusion {
  std::string node_id;
  std::string hostname;
  bool by_host = false;
  std::string reason;
  double score = 0;
  absl::Time since;
  absl::Time until;
};

// Rounds a job remembers for its timeline (JobStatus.history).
inline constexpr size_t kMaxHistory = 32;
// Former members a job remembers to prefer them to fresh spares.
inline constexpr size_t kMaxFormerNodes = 100'000;

struct Job {
  std::string id;
  // Written only by Impl::Transition (job_phase.h has the table); read freely.
  JobState state = JobState::kOpen;
  // Fixed by the first Join (or by the Join that reruns an ended job).
  int32_t min_nodes = 1;
  int32_t max_nodes = 1;
  int32_t max_restarts = 0;
  absl::Duration join_timeout;
  absl::Duration last_call_timeout;
  // --worker-timeout (Join.worker_timeout_ms); zero: progress not watched.
  absl::Duration worker_timeout;
  // The progress watch (coordinator_progress.cc): the round CaptureHang was
  // sent for (once per round), and when the members' progress is next read.
  int64_t hang_round = 0;
  absl::Time next_progress_check = absl::InfinitePast();
  // Stragglers (coordinator_stragglers.cc), the policy from the first Join:
  // "report", "replace" or "exclude"; the tracker of the running round
  // (shared_ptr: Job is reassigned whole by StartJobAfresh); the round
  // already acted on (at most one exclusion a round) and the one whose
  // impossibility was logged; the excluded nodes.
  std::string straggler_action = "report";
  StragglerPolicy straggler_policy;
  absl::Duration exclude_cooldown = absl::Minutes(10);
  std::shared_ptr<StragglerTracker> stragglers;
  absl::Time next_straggler_check = absl::InfinitePast();
  int64_t straggler_acted_round = 0;
  int64_t straggler_logged_round = 0;
  std::vector<Exclusion> excluded;
  // --exclude-after-failures (0: never) and each node's count of rounds in a
  // row that its workers' failure ended (OnWorkersFailed: only the node that
  // ended a round counts; another node's failure resets it).
  int32_t exclude_after_failures = 0;
  std::map<std::string, int> failed_in_a_row;
  // Nodes (ids and hosts) that were members of one of the job's rounds and
  // were lost since: one that comes back goes before a fresh spare
  // (CloseRound). Capped at kMaxFormerNodes each.
  std::set<std::string> former_ids;
  std::set<std::string> former_hosts;

  // The current round: the one being formed while OPEN, the one running while
  // RUNNING, the last one once ended. 0 before the first round opens.
  int64_t round = 0;
  int32_t restart_count = 0;
  // The restart count the journal of a restarted musterd had for the job
  // (ResumeJob): the least it goes on with when no round is re-adopted.
  int32_t resumed_restart_count = 0;
  // OPEN: when the round gives up waiting for min_nodes, and when last call
  // ends it.
  absl::Time join_deadline = absl::InfiniteFuture();
  absl::Time last_call_deadline = absl::InfiniteFuture();
  // Ended and no agent connected: when the job is forgotten.
  absl::Time forget_at = absl::InfiniteFuture();
  int64_t next_join_seq = 0;
  // Nodes with status kWaiting (kept by SetStatus and EraseNode).
  int waiting_count = 0;
  // Coalesced Waiting updates: when the last went out, and when the pending
  // one is due (InfiniteFuture: none pending).
  absl::Time waiting_sent_at = absl::InfinitePast();
  absl::Time waiting_flush_at = absl::InfiniteFuture();

  // Connected agents by node id.
  std::map<std::string, Node> nodes;
  // The RUNNING (or last) round's members by group rank; empty while OPEN.
  std::vector<Member> members;
  // Node id -> index into members, and the round's WORLD_SIZE.
  absl::flat_hash_map<std::string, int> member_index;
  int32_t world_size = 0;
  // Members that reported success in this round.
  std::set<std::string> succeeded;
  // Node ids of the last round that ran, by group rank: survivors keep it.
  std::vector<std::string> previous_order;
  // "node h [id]: why" for each agent lost since the last round formed; the
  // join-timeout root cause names them.
  std::vector<std::string> losses;
  // OPEN after a restart: the survivors of the ended round that have not
  // rejoined yet. When the last of them is back the round closes at once
  // (with min_nodes waiting): there is nobody else it was waiting for, and
  // last call exists for newcomers, not for a round re-forming.
  std::set<std::string> awaited_survivors;
  bool reforming = false;  // OPEN after a restart (awaited_survivors applies).
  // Re-adoption: a musterd that does not know the job hears
  // its agents claim a RUNNING round (Join.claim). The job waits OPEN (no
  // round closes) until every member of that round is back, then runs it on
  // unchanged; at adopt_deadline, or on a claim that does not fit, it opens
  // the next round instead.
  bool adopting = false;  // written only by Impl::Transition (ADOPTING)
  absl::Time adopt_deadline = absl::InfiniteFuture();
  v1::RoundReady adopt_round;  // the first claim (peers cleared)
  std::map<std::string, v1::RoundReady> adopt_claims;  // by node id
  // Every node back that claims the round, with the group rank it claims;
  // and why the round cannot be re-adopted (empty while it can).
  std::map<std::string, int> adopt_seen;
  std::string adopt_broken;

  std::optional<v1::WorkerFailure> first_failure;  // of the whole job
  std::vector<v1::WorkerFailure> round_failures;   // of the last round that ran
  std::string root_cause;                          // when FAILED
  std::string last_failure;                        // for Status
  // The last kMaxHistory rounds, oldest first (GetStatus of one job).
  std::deque<v1::RoundRecord> history;
  // Once ended: the verdict (JobSucceeded or JobFailed) and the nodes it was
  // meant for, so that one whose session broke as the job ended hears it when
  // it reconnects instead of starting a rerun on its own.
  std::optional<v1::ServerMessage> verdict;
  std::set<std::string> verdict_nodes;

  JobPhase phase() const { return PhaseOf(state, adopting); }
  bool ended() const {
    return state == JobState::kSucceeded || state == JobState::kFailed;
  }
  int WaitingCount() const { return waiting_count; }
  // Every change of a node's status, and every removal, goes through these:
  // they keep waiting_count.
  void SetStatus(Node& node, NodeStatus status) {
    waiting_count += (status == NodeStatus::kWaiting) -
                     (node.status == NodeStatus::kWaiting);
    node.status = status;
  }
  void EraseNode(std::map<std::string, Node>::iterator it) {
    waiting_count -= it->second.status == NodeStatus::kWaiting;
    nodes.erase(it);
  }
};

// The connection table: the only place that refers to channels.
struct Connection {
  std::shared_ptr<AgentChannel> channel;
  std::string job_id;
  std::string node_id;
  // When it was last heard from: in Impl::liveness_, apart from the lock.
  // max(the agent's heartbeat timeout, its lease): see lease.h.
  absl::Duration heartbeat_timeout;
  int64_t heartbeat_interval_ms = 0;
  // Lease fencing (lease.h): the agent's lease. When the next renewal is due,
  // and whether one is wanted now, is in Impl::leases_, apart from the lock.
  absl::Duration lease;
  // We ended the stream (job over); it stays here until the adapter reports the
  // disconnect, so a rerun of the job waits for its agents to be gone.
  bool closed = false;
};

// A node's latest word on its workers' progress (Heartbeat.progress_age_ms):
// for which round, and how long none of them had progressed when it was sent.
struct ProgressMark {
  int64_t round = 0;
  absl::Duration silence;
};

// A node's latest speed counters (Heartbeat.speeds) for `round`, and when they
// came.
struct SpeedMark {
  int64_t round = 0;
  std::vector<v1::RankSpeedSample> samples;
  absl::Time at;
};

// How often the straggler watch scores a running job.
inline constexpr absl::Duration kStragglerCheckInterval = absl::Seconds(1);

// The straggler policy of a Join, or INVALID_ARGUMENT naming the bad field
// and the fix (coordinator_stragglers.cc).
absl::Status ValidateStragglerPolicy(const v1::Join& join);
// The job's JobStatus fields of the straggler watch
// (coordinator_stragglers.cc): stragglers, excluded nodes and the policy; every
// rank's speed when `one_job`.
void FillStragglerStatus(const Job& job, v1::JobStatus* s, bool one_job,
                         absl::Time now);

// "; rank 3 (node H [N]) was a straggler (speed 0.48)" for each straggler of
// the job's running round, or "" (the hang report's reason and the failure's
// root cause name them; coordinator_stragglers.cc).
std::string StragglerNote(const Job& job);

// How often the progress watch reads a watched job's members (a job-wide
// scan, so not on every tick).
inline constexpr absl::Duration kProgressCheckInterval =
    absl::Milliseconds(250);

// ---------- Impl

class Coordinator::Impl {
 public:
  Impl(CoordinatorOptions options, Clock* clock)
      : options_(std::move(options)), clock_(clock) {}

  absl::Status OnJoin(ConnectionId conn, const v1::Join& join,
                      std::shared_ptr<AgentChannel> channel)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool OnHeartbeat(ConnectionId conn, const v1::Heartbeat& heartbeat)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The heartbeat budget's current suggestion, in ms (0: none), for the
  // agents connected (kept in step with conns_ by UpdateHeartbeatSuggestion),
  // read without the lock.
  int64_t SuggestedHeartbeatMs() const {
    return suggested_heartbeat_ms_.load(std::memory_order_relaxed);
  }
  // For an agent of a job of up to max_nodes: the job's size counts before
  // its agents have all connected, so that the first agents of a large round
  // do not beat at 250 ms while it forms.
  int64_t SuggestedHeartbeatMs(int64_t max_nodes) const {
    return std::max(
        SuggestedHeartbeatMs(),
        absl::ToInt64Milliseconds(rendezvous::SuggestedHeartbeatInterval(
            max_nodes, options_.heartbeat_budget_per_second)));
  }
  // The same for conn's agent (its job's size as of its Join), lock-free.
  int64_t SuggestedHeartbeatMsFor(ConnectionId conn) const {
    const std::optional<absl::Time> job = job_suggestion_.Get(conn);
    return std::max(SuggestedHeartbeatMs(),
                    job.has_value()
                        ? absl::ToInt64Milliseconds(*job - absl::UnixEpoch())
                        : int64_t{0});
  }
  void OnPreflightFailed(ConnectionId conn, const v1::PreflightFailed& failed)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnWorkersFailed(ConnectionId conn, const v1::WorkersFailed& failed)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnWorkersSucceeded(ConnectionId conn,
                          const v1::WorkersSucceeded& succeeded)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnLeave(ConnectionId conn, const v1::Leave& leave)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnDisconnect(ConnectionId conn) ABSL_LOCKS_EXCLUDED(mu_);
  // OnLeave and OnDisconnect: the stream's node is lost for `why` (LoseNode);
  // a stream that never joined is only forgotten.
  void StreamEnded(ConnectionId conn, const std::string& why,
                   std::optional<absl::Status> close_with)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Time Tick() ABSL_LOCKS_EXCLUDED(mu_);
  v1::GetStatusResponse Status(absl::string_view job_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  v1::GetStatusResponse StatusPage(const StatusPageQuery& query) const
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t ConnectedAgents() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t JobCount() const ABSL_LOCKS_EXCLUDED(mu_);
  void CountJoin() { joins_accepted_.fetch_add(1, std::memory_order_relaxed); }
  int64_t JoinsAccepted() const {
    return joins_accepted_.load(std::memory_order_relaxed);
  }
  int64_t RoundsReady() const {
    return rounds_ready_.load(std::memory_order_relaxed);
  }
  void ResumeJob(const std::string& job_id, int64_t round,
                 int32_t restart_count) ABSL_LOCKS_EXCLUDED(mu_);
  void ForgiveSilence() ABSL_LOCKS_EXCLUDED(mu_);
  // The fencing token every message carries (Coordinator::SetEpoch).
  void SetEpoch(int64_t epoch) {
    epoch_.store(epoch, std::memory_order_release);
  }
  int64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

 private:
  // --- lookups and channel I/O
  // The connection's job and node, or nulls when conn is unknown or its job is
  // gone.
  // The job and node behind a report from `conn` about `round`, when the report
  // is current: the job RUNNING that round with the node among its members.
  // Otherwise nulls, and a stale `what` is logged.
  std::pair<Job*, Node*> CurrentMember(ConnectionId conn, int64_t round,
                                       absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::pair<Job*, Node*> Find(ConnectionId conn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Any message is a heartbeat (liveness_: no lock of ours needed).
  void Touch(ConnectionId conn);
  // Removes a connection from conns_ and liveness_.
  void EraseConnection(
      absl::flat_hash_map<ConnectionId, Connection>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues msg for conn's agent in the outbox (written once the lock is
  // released). Moved, not copied: a RoundReady of a large round lists a
  // dozen peers, and each member gets its own.
  void Send(ConnectionId conn, v1::ServerMessage msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(ConnectionId conn, std::shared_ptr<const v1::ServerMessage> msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends a RoundReady (RoundReadyFor) to conn's agent: from now on its lease
  // is renewed (it runs workers), and the RoundReady carries the renewal of
  // the last seq the stream brought (RoundReady.lease_seq; lease.h).
  void SendRoundReady(ConnectionId conn, v1::ServerMessage msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the job's end message to every connected agent and closes each stream
  // with OK.
  void SendFinalAndClose(Job& job, const v1::ServerMessage& msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const v1::ServerMessage> WaitingMessage(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendWaiting(const Job& job, const Node& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells every waiting node the count: at once in a small job, when a
  // threshold is crossed (force), or when waiting_update_interval has passed
  // since the last update; otherwise it is due at waiting_flush_at (Tick), and
  // only `joiner` (when set) hears now.
  void SendWaitingToAll(Job& job, const Node* joiner = nullptr,
                        bool force = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::ServerMessage MakeRoundReady(const Job& job,
                                   const std::string& node_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- Join admission (coordinator_join.cc), OnJoin's steps in order.
  // 1. Validate: a malformed Join is refused before any state is touched;
  // sets the lease it asks for.
  absl::Status ValidateJoin(const v1::Join& join,
                            const std::shared_ptr<AgentChannel>& channel,
                            absl::Duration* lease) const;
  // 2. Admit: the job the Join is for. answered: the Join of a node of an
  // ended job that missed the verdict, which was sent again (nothing more to
  // do); fresh: the job was created, rerun or restarted (StartJobAfresh).
  struct Admission {
    Job* job = nullptr;
    bool created = false;
    bool fresh = false;
    bool answered = false;
  };
  absl::StatusOr<Admission> AdmitJoin(ConnectionId conn, const v1::Join& join,
                                      std::shared_ptr<AgentChannel>& channel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resets job to the Join's terms, keeping the round counter (and taking a
  // restarted musterd's journal for a created one).
  void StartJobAfresh(Job& job, const v1::Join& join, bool created, bool rerun)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // 3. Register: the connection (liveness, lease, heartbeat deadline) ...
  void RegisterStream(ConnectionId conn, const v1::Join& join,
                      std::shared_ptr<AgentChannel> channel,
                      absl::Duration lease, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ... and the node (a reconnect replaces its old stream).
  Node& RegisterNode(Job& job, ConnectionId conn, const v1::Join& join)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fresh job's first round: opened, or adopted from the Join's claim.
  void OpenFirstRound(Job& job, const v1::Join& join, bool created)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // 4. Dispatch: place the node by the job's state.
  void DispatchJoin(Job& job, Node& node, ConnectionId conn,
                    const v1::Join& join) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RUNNING: a member carries on (or ends the round, fenced), a newcomer
  // scales up or waits as a spare.
  void JoinRunningRound(Job& job, Node& node, ConnectionId conn,
                        const v1::Join& join)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Join for a node id that is connected on another stream must present the
  // node's session secret. ALREADY_EXISTS otherwise; nothing is touched.
  absl::Status CheckSessionSecret(const Job& job, ConnectionId conn,
                                  const v1::Join& join) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The RoundReady of members[index]: its ranks and the peers it needs
  // (round_peers.h). O(1) for rounds above kFullPeerListMax nodes.
  v1::ServerMessage RoundReadyFor(const Job& job, int index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands a store namespace that is no longer needed to on_round_end.
  void DropNamespace(const std::string& prefix)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- transitions
  // Every change of job.state and job.adopting: checked against the table
  // (job_phase.h); one it does not have is logged as a bug (and made, as the
  // agent does: the event handlers decided it).
  void Transition(Job& job, JobPhase to, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts round job.round + 1 in OPEN; the waiting nodes (spares, newcomers)
  // are its first candidates.
  void OpenRound(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OPEN: a node entered the waiting set; closes at max, arms last call at min.
  void AddWaiting(Job& job, Node& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OPEN: closes at once at max, or arms the last-call timer at min; else
  // re-sends Waiting.
  void CheckCount(Job& job, const Node* joiner = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OPEN -> RUNNING (or FAILED when the ranks cannot be assigned).
  void CloseRound(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RUNNING -> OPEN (Restart to every member), or FAILED when a worker failure
  // finds no restarts left.
  void EndRound(Job& job, const std::string& reason, bool worker_failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OPEN/RUNNING -> FAILED.
  // Closes the job's current round in its history (a no-op when it was not
  // made ready).
  void EndHistory(Job& job, absl::string_view ended_by,
                  absl::string_view reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJob(Job& job, const std::string& root_cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RUNNING -> SUCCEEDED.
  void SucceedJob(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An agent is gone (stream closed, Leave, missed heartbeats). close_with,
  // when set, ends its stream. In RUNNING a member that has not succeeded ends
  // the round.
  void LoseNode(Job& job, const std::string& node_id, const std::string& why,
                std::optional<absl::Status> close_with)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- re-adoption after a musterd restart (Job::adopting)
  static bool AdoptableClaim(const v1::Join& join);
  void StartAdoption(Job& job, const v1::Join& join)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Join while adopting: a fitting claim is recorded (and the round runs
  // on once every member is back); anything else ends the adoption.
  void OnAdoptionJoin(Job& job, Node& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every member is back: RUNNING as claimed, RoundReady to each.
  void CompleteAdoption(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The round cannot be re-adopted: the claimers (in their group order) and
  // any newcomers wait for the next round.
  void AbandonAdoption(Job& job, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's last agent is gone, or it was never anyone's: start the retention
  // clock.
  void MaybeStartRetention(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The connection's heartbeat deadline (nullopt: gone), for heartbeats_.
  std::optional<absl::Time> HeartbeatDeadline(ConnectionId id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loses every node whose heartbeat_timeout has passed at now (Tick).
  void ExpireHeartbeats(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- the progress watch (coordinator_progress.cc)
  // RUNNING with a worker timeout: when every member that has not succeeded
  // reported (for this round) no progress for at least the timeout, sends
  // each of them CaptureHang, once per round. Reads at most every
  // kProgressCheckInterval; returns when it is next due.
  absl::Time CheckProgress(Job& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- the straggler watch (coordinator_stragglers.cc)
  // RUNNING: feeds the members' latest speed counters to the job's tracker
  // (every kStragglerCheckInterval), logs who became or stopped being a
  // straggler, and under replace / exclude excludes the slowest node when it
  // can. Returns when it is next due (Tick does not wait for it: the
  // server ticks often enough).
  absl::Time CheckStragglers(Job& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `node_id` Excluded, records the exclusion and loses the node (the
  // round ends as for a lost node; in place, the others keep their workers).
  // `by` names the rule in musterd's log ("--straggler-action=replace").
  void ExcludeNode(Job& job, const std::string& node_id,
                   const std::string& reason, double score, absl::Time now,
                   const std::string& by) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Only records the exclusion (and logs it): the node's Joins are refused
  // until the cooldown has passed.
  void RecordExclusion(Job& job, const Node& node, const std::string& reason,
                       double score, absl::Time now, const std::string& by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A member's workers failed and ended the round: counts the rounds in a row
  // and, at --exclude-after-failures, excludes the node once the round has
  // ended, when the job keeps its minimum without it or a spare waits.
  // Returns whether the node is to be excluded (the caller ends the round
  // first, then calls ExcludeNode).
  bool CountFailedRound(Job& job, const std::string& node_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Join of a node excluded from the job (cooldown not over): answered with
  // Excluded and its stream closed; true when it was.
  bool AnswerExcludedJoin(Job& job, const v1::Join& join,
                          std::shared_ptr<AgentChannel>& channel,
                          absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's policy from the Join that creates (or reruns) it.
  static void TakeStragglerPolicy(Job& job, const v1::Join& join);
  // OPEN, join_timeout passed with fewer than min_nodes: the root cause.
  std::string JoinTimeoutCause(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ConnectionId, Connection> conns_ ABSL_GUARDED_BY(mu_);
  // Jobs of a restarted musterd's journal not back yet: round, restarts.
  std::map<std::string, std::pair<int64_t, int32_t>> resumed_
      ABSL_GUARDED_BY(mu_);
  // Heartbeat deadlines of conns_ (lazy: a heartbeat does not touch it).
  DeadlineQueue<ConnectionId> heartbeats_ ABSL_GUARDED_BY(mu_);
  // When each connection of conns_ was last heard from. Heartbeats write it
  // without mu_ (liveness_table.h); entries come and go with conns_.
  LivenessTable<ConnectionId> liveness_;
  // Lease fencing, apart from the lock like liveness_ (a heartbeat renews a
  // lease without mu_): each connection's StreamLease (lease.h). A stream the
  // server has ended is not in leases_: it renews nothing.
  ShardedTable<ConnectionId, StreamLease> leases_;
  // The progress watch: each connection's latest Heartbeat.progress_age_ms
  // with its round (written by heartbeats without mu_, like liveness_).
  ShardedTable<ConnectionId, ProgressMark> progress_;
  // The straggler watch: each connection's latest Heartbeat.speeds (written by
  // heartbeats without mu_, like progress_).
  ShardedTable<ConnectionId, SpeedMark> speeds_;
  // The heartbeat budget (heartbeat_budget.h) for conns_.size() agents;
  // updated under mu_ when conns_ grows or shrinks.
  std::atomic<int64_t> suggested_heartbeat_ms_{0};
  std::atomic<int64_t> epoch_{0};
  // JoinsAccepted / RoundsReady (coordinator.h).
  std::atomic<int64_t> joins_accepted_{0};
  std::atomic<int64_t> rounds_ready_{0};
  // Each connection's job-size suggestion (UnixEpoch() + the interval), set
  // by its Join, for LeaseRenewed without the lock.
  LivenessTable<ConnectionId> job_suggestion_;
  void UpdateHeartbeatSuggestion() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 public:
  // Messages and closes for agents, appended under mu_ and written by
  // Flush() after it is released (the Coordinator's methods call it last).
  Outbox outbox_;
  void Flush() ABSL_LOCKS_EXCLUDED(mu_) { outbox_.Flush(); }
  void Drain() ABSL_LOCKS_EXCLUDED(mu_) { outbox_.Drain(); }
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_COORDINATOR_INTERNAL_H_
