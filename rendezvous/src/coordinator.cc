// The Coordinator's state machine. Layout of this file:
//  1. text helpers (root causes, durations, signal names);
//  2. plain data: Job, Node, Member (serialisable in spirit: no channel
//     pointers) and the connection table, the only place holding channels;
//  3. transitions, one function each: OpenRound, CloseRound, EndRound,
//     FailJob, SucceedJob, LoseNode; the event handlers (OnJoin,
//     OnWorkersFailed, Tick, ...) decide which one applies and call it, so
//     each state change happens in exactly one place.
//
// Status of a node inside a job (Node::status):
//  kPending  connected but not in the open round: a survivor after Restart
//            that has not rejoined yet, or an agent of an ended job.
//  kWaiting  in the open round's waiting set, or a spare while the round
//            runs at max_nodes.
//  kMember   a member of the RUNNING round.
//
// Choices the header leaves open:
//  - A job's timeouts (join, last call) come from the Join that creates (or
//    reruns) it; later Joins' values are not compared.
//  - join_timeout bounds the OPEN phase either way: with >= min_nodes joined
//    when it passes the round closes, with fewer the job fails.
//  - Spares waiting while a round runs at max are candidates for the next
//    round at once; if they reach max before the survivors rejoin, the round
//    forms with them and late survivors become spares. When more than max
//    wait, survivors are chosen first, then by arrival.
//  - A newcomer while RUNNING below max waits as a spare, instead of scaling
//    up, once any member has reported success: the round is finishing, and a
//    new round would rerun work that is done. It gets the job's verdict.
//  - Waiting sent to a spare names the next round and has deadline 0 (none).
//  - A Join for an ended job from a node the verdict was sent to (its session
//    broke as the job ended) gets the verdict again and its stream is closed;
//    it is not a rerun (a rerun's agents have new node ids).
//  - A Join from a member of the RUNNING round (same or new stream) re-sends
//    its RoundReady; it does not restart the round.
//  - The root cause of a failed job is the first worker failure reported to
//    the server (within one report, the earliest by timestamp).
#include "muster/rendezvous/coordinator.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "muster/common/logging.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/rank_assignment.h"
#include "rendezvous/src/deadline_queue.h"
#include "rendezvous/src/lease.h"
#include "rendezvous/src/outbox.h"
#include "rendezvous/src/round_peers.h"

namespace muster::rendezvous {

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kOpen:
      return "OPEN";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

namespace {

// ---------- text helpers

// "600s" rather than absl's "10m": the flags and rdzv-conf are given in
// seconds.
std::string FormatSeconds(absl::Duration d) {
  if (d % absl::Seconds(1) == absl::ZeroDuration()) {
    return absl::StrCat(absl::ToInt64Seconds(d), "s");
  }
  return absl::FormatDuration(d);
}

std::string NNodesFlag(int min_nodes, int max_nodes) {
  if (min_nodes == max_nodes) return absl::StrCat("--nnodes=", min_nodes);
  return absl::StrCat("--nnodes=", min_nodes, ":", max_nodes);
}

// "node h2 [node-b]": the hostname is what people recognise, the node id what
// the logs key on.
std::string DescribeNode(absl::string_view hostname,
                         absl::string_view node_id) {
  if (hostname.empty() || hostname == node_id)
    return absl::StrCat("node ", node_id);
  return absl::StrCat("node ", hostname, " [", node_id, "]");
}

// Linux numbering: agents run on Linux or report Linux-style numbers; the
// server may run anywhere, so <csignal> of the server's platform is not the
// right table.
absl::string_view SignalName(int signal) {
  switch (signal) {
    case 1:
      return "SIGHUP";
    case 2:
      return "SIGINT";
    case 3:
      return "SIGQUIT";
    case 4:
      return "SIGILL";
    case 5:
      return "SIGTRAP";
    case 6:
      return "SIGABRT";
    case 7:
      return "SIGBUS";
    case 8:
      return "SIGFPE";
    case 9:
      return "SIGKILL";
    case 10:
      return "SIGUSR1";
    case 11:
      return "SIGSEGV";
    case 12:
      return "SIGUSR2";
    case 13:
      return "SIGPIPE";
    case 14:
      return "SIGALRM";
    case 15:
      return "SIGTERM";
    case 24:
      return "SIGXCPU";
    case 25:
      return "SIGXFSZ";
  }
  return "";
}

// The first non-empty line: a root cause is one line, error files may hold a
// traceback.
absl::string_view FirstLine(absl::string_view text) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    absl::string_view line = text.substr(0, nl);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.remove_suffix(1);
    if (!line.empty()) return line;
    if (nl == absl::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return "";
}

// One line: "worker rank 3 (local rank 1) on node h2 [node-b] exited with code
// 7 at 2026-11-21T10:00:00Z: ValueError: bad batch".
std::string DescribeFailure(const v1::WorkerFailure& f) {
  std::string out = absl::StrCat("worker rank ", f.global_rank(),
                                 " (local rank ", f.local_rank(), ") on ",
                                 DescribeNode(f.hostname(), f.node_id()));
  if (f.signal() != 0) {
    absl::string_view name = SignalName(f.signal());
    absl::StrAppend(&out, " was killed by signal ", f.signal());
    if (!name.empty()) absl::StrAppend(&out, " (", name, ")");
  } else {
    absl::StrAppend(&out, " exited with code ", f.exit_code());
  }
  if (f.timestamp_unix_ms() > 0) {
    absl::StrAppend(
        &out, " at ",
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                         absl::FromUnixMillis(f.timestamp_unix_ms()),
                         absl::UTCTimeZone()));
  }
  absl::string_view message = FirstLine(f.error_message());
  if (!message.empty()) absl::StrAppend(&out, ": ", message);
  return out;
}

// Within one report, the failure that happened first is the likeliest cause of
// the others.
const v1::WorkerFailure* EarliestFailure(const v1::WorkersFailed& report) {
  const v1::WorkerFailure* best = nullptr;
  for (const v1::WorkerFailure& f : report.failures()) {
    if (best == nullptr) {
      best = &f;
      continue;
    }
    const bool f_known = f.timestamp_unix_ms() > 0;
    const bool best_known = best->timestamp_unix_ms() > 0;
    if (f_known &&
        (!best_known || f.timestamp_unix_ms() < best->timestamp_unix_ms()))
      best = &f;
  }
  return best;
}

std::string StorePrefix(absl::string_view job_id, int64_t round) {
  return absl::StrCat(job_id, "/", round);
}

// Jobs with at most this many waiting agents tell each of them about every
// change at once; larger ones coalesce the updates to one per
// waiting_update_interval (and on the min_nodes threshold), so a join costs
// O(1) messages instead of one per waiting agent.
constexpr int kWaitingAtOnceMax = 64;

int64_t ToUnixMillisOrZero(absl::Time t) {
  if (t == absl::InfiniteFuture() || t == absl::InfinitePast()) return 0;
  return absl::ToUnixMillis(t);
}

absl::Duration MillisOr(int64_t ms, absl::Duration fallback) {
  return ms > 0 ? absl::Milliseconds(ms) : fallback;
}

// ---------- plain data

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

struct Job {
  std::string id;
  JobState state = JobState::kOpen;
  // Fixed by the first Join (or by the Join that reruns an ended job).
  int32_t min_nodes = 1;
  int32_t max_nodes = 1;
  int32_t max_restarts = 0;
  absl::Duration join_timeout;
  absl::Duration last_call_timeout;

  // The current round: the one being formed while OPEN, the one running while
  // RUNNING, the last one once ended. 0 before the first round opens.
  int64_t round = 0;
  int32_t restart_count = 0;
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
  // Re-adoption (issue 11 item 4): a musterd that does not know the job hears
  // its agents claim a RUNNING round (Join.claim). The job waits OPEN (no
  // round closes) until every member of that round is back, then runs it on
  // unchanged; at adopt_deadline, or on a claim that does not fit, it opens
  // the next round instead.
  bool adopting = false;
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
  // Once ended: the verdict (JobSucceeded or JobFailed) and the nodes it was
  // meant for, so that one whose session broke as the job ended hears it when
  // it reconnects instead of starting a rerun on its own.
  std::optional<v1::ServerMessage> verdict;
  std::set<std::string> verdict_nodes;

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

// A time that may be written under a shared lock (relaxed: only the value
// matters, and Tick reads it under the exclusive lock). Copyable so that it can
// live in a hash map, which moves entries only under the exclusive lock.
class AtomicTime {
 public:
  AtomicTime() = default;
  AtomicTime(const AtomicTime& o)
      : ns_(o.ns_.load(std::memory_order_relaxed)) {}
  AtomicTime& operator=(const AtomicTime& o) {
    ns_.store(o.ns_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  AtomicTime& operator=(absl::Time t) {
    ns_.store(absl::ToUnixNanos(t), std::memory_order_relaxed);
    return *this;
  }
  absl::Time Get() const {
    return absl::FromUnixNanos(ns_.load(std::memory_order_relaxed));
  }

 private:
  std::atomic<int64_t> ns_{0};
};

// The connection table: the only place that refers to channels.
struct Connection {
  std::shared_ptr<AgentChannel> channel;
  std::string job_id;
  std::string node_id;
  // Written by heartbeats under a shared (reader) lock: they are most of the
  // events, and taking the lock exclusively for each one starved whole
  // connections of gRPC threads at 10,000 agents.
  AtomicTime last_seen;
  // max(the agent's heartbeat timeout, its lease): see lease.h.
  absl::Duration heartbeat_timeout;
  int64_t heartbeat_interval_ms = 0;
  // Lease fencing (lease.h): the agent's lease and when it was last renewed.
  absl::Duration lease;
  AtomicTime last_lease_ack;
  // We ended the stream (job over); it stays here until the adapter reports the
  // disconnect, so a rerun of the job waits for its agents to be gone.
  bool closed = false;
};

}  // namespace

// ---------- Impl

class Coordinator::Impl {
 public:
  Impl(CoordinatorOptions options, Clock* clock)
      : options_(std::move(options)), clock_(clock) {}

  absl::Status OnJoin(ConnectionId conn, const v1::Join& join,
                      std::shared_ptr<AgentChannel> channel)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool OnHeartbeat(ConnectionId conn) ABSL_LOCKS_EXCLUDED(mu_);
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
  absl::Time Tick() ABSL_LOCKS_EXCLUDED(mu_);
  v1::GetStatusResponse Status(absl::string_view job_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t ConnectedAgents() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t JobCount() const ABSL_LOCKS_EXCLUDED(mu_);

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
  // Any message is a heartbeat.
  void Touch(ConnectionId conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same under the shared lock (a heartbeat: nothing else changes).
  void TouchShared(ConnectionId conn) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Queues msg for conn's agent in the outbox (written once the lock is
  // released).
  void Send(ConnectionId conn, const v1::ServerMessage& msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(ConnectionId conn, std::shared_ptr<const v1::ServerMessage> msg)
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
  // OPEN, join_timeout passed with fewer than min_nodes: the root cause.
  std::string JoinTimeoutCause(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ConnectionId, Connection> conns_ ABSL_GUARDED_BY(mu_);
  // Heartbeat deadlines of conns_ (lazy: a heartbeat does not touch it).
  DeadlineQueue<ConnectionId> heartbeats_ ABSL_GUARDED_BY(mu_);

 public:
  // Messages and closes for agents, appended under mu_ and written by
  // Flush() after it is released (the Coordinator's methods call it last).
  Outbox outbox_;
  void Flush() ABSL_LOCKS_EXCLUDED(mu_) { outbox_.Flush(); }
  void Drain() ABSL_LOCKS_EXCLUDED(mu_) { outbox_.Drain(); }
};

// ---------- helpers

std::pair<Job*, Node*> Coordinator::Impl::CurrentMember(
    ConnectionId conn, int64_t round, absl::string_view what) {
  auto [job, node] = Find(conn);
  if (job == nullptr || node == nullptr) return {nullptr, nullptr};
  if (job->state != JobState::kRunning || round != job->round ||
      node->status != NodeStatus::kMember) {
    MUSTER_LOG_AT(options_.event_log_level)
        << "job " << job->id << ": ignoring a stale " << what << " of "
        << DescribeNode(node->join.hostname(), node->join.node_id())
        << " for round " << round << " (now round " << job->round << ", "
        << JobStateName(job->state) << ")";
    return {nullptr, nullptr};
  }
  return {job, node};
}

absl::Status Coordinator::Impl::CheckSessionSecret(const Job& job,
                                                   ConnectionId conn,
                                                   const v1::Join& join) const {
  auto n = job.nodes.find(join.node_id());
  if (n == job.nodes.end() || n->second.conn == conn ||
      !n->second.session_digest.has_value()) {
    return absl::OkStatus();  // a new node, its own stream, or a legacy agent
  }
  if (!join.session_secret().empty() &&
      SecretEquals(HashSecret(join.session_secret()),
                   *n->second.session_digest)) {
    return absl::OkStatus();  // the node's own agent, reconnecting
  }
  MUSTER_LOG(WARNING) << "job " << job.id << ": refused a Join for node "
                      << join.node_id()
                      << " from another session without the node's session "
                         "secret; the connected agent keeps its place";
  return absl::AlreadyExistsError(absl::StrCat(
      "node ", join.node_id(), " of job ", job.id,
      " is connected from another agent, and this Join does not carry that "
      "agent's session secret; give every agent its own node id (a restarted "
      "agent joins as a new node)"));
}

std::pair<Job*, Node*> Coordinator::Impl::Find(ConnectionId conn) {
  auto c = conns_.find(conn);
  if (c == conns_.end()) return {nullptr, nullptr};
  auto j = jobs_.find(c->second.job_id);
  if (j == jobs_.end()) return {nullptr, nullptr};
  auto n = j->second.nodes.find(c->second.node_id);
  if (n == j->second.nodes.end() || n->second.conn != conn)
    return {&j->second, nullptr};
  return {&j->second, &n->second};
}

void Coordinator::Impl::Touch(ConnectionId conn) {
  auto c = conns_.find(conn);
  if (c != conns_.end()) c->second.last_seen = clock_->Now();
}

void Coordinator::Impl::TouchShared(ConnectionId conn) {
  auto c = conns_.find(conn);
  if (c != conns_.end()) c->second.last_seen = clock_->Now();
}

void Coordinator::Impl::Send(ConnectionId conn, const v1::ServerMessage& msg) {
  Send(conn, std::make_shared<const v1::ServerMessage>(msg));
}

void Coordinator::Impl::Send(ConnectionId conn,
                             std::shared_ptr<const v1::ServerMessage> msg) {
  auto c = conns_.find(conn);
  if (c == conns_.end() || c->second.closed) return;
  outbox_.Send(c->second.channel, std::move(msg));
}

void Coordinator::Impl::SendFinalAndClose(Job& job,
                                          const v1::ServerMessage& msg) {
  job.verdict = msg;
  auto shared = std::make_shared<const v1::ServerMessage>(msg);
  for (const Member& m : job.members) job.verdict_nodes.insert(m.rank.node_id);
  for (auto& [id, node] : job.nodes) {
    job.verdict_nodes.insert(id);
    auto c = conns_.find(node.conn);
    if (c == conns_.end() || c->second.closed) continue;
    outbox_.Send(c->second.channel, shared);
    outbox_.Close(c->second.channel, absl::OkStatus());
    c->second.closed = true;
    job.SetStatus(node, NodeStatus::kPending);
  }
}

std::shared_ptr<const v1::ServerMessage> Coordinator::Impl::WaitingMessage(
    const Job& job) const {
  auto msg = std::make_shared<v1::ServerMessage>();
  v1::Waiting* w = msg->mutable_waiting();
  if (job.state == JobState::kOpen) {
    w->set_round(job.round);
    w->set_deadline_unix_ms(ToUnixMillisOrZero(job.join_deadline));
  } else {
    // A spare while RUNNING waits for the next round, which has no deadline yet
    // (0 = none).
    w->set_round(job.round + 1);
  }
  w->set_joined(job.WaitingCount());
  w->set_min_nodes(job.min_nodes);
  w->set_max_nodes(job.max_nodes);
  return msg;
}

void Coordinator::Impl::SendWaiting(const Job& job, const Node& node) {
  Send(node.conn, WaitingMessage(job));
}

void Coordinator::Impl::SendWaitingToAll(Job& job, const Node* joiner,
                                         bool force) {
  const absl::Time now = clock_->Now();
  const absl::Time due = job.waiting_sent_at + options_.waiting_update_interval;
  if (!force && job.WaitingCount() > kWaitingAtOnceMax && now < due) {
    job.waiting_flush_at = due;
    if (joiner != nullptr) SendWaiting(job, *joiner);
    return;
  }
  job.waiting_sent_at = now;
  job.waiting_flush_at = absl::InfiniteFuture();
  if (job.WaitingCount() == 0) return;
  std::shared_ptr<const v1::ServerMessage> msg = WaitingMessage(job);
  for (const auto& [id, node] : job.nodes) {
    if (node.status == NodeStatus::kWaiting) Send(node.conn, msg);
  }
}

v1::ServerMessage Coordinator::Impl::MakeRoundReady(
    const Job& job, const std::string& node_id) const {
  auto it = job.member_index.find(node_id);
  return RoundReadyFor(job, it == job.member_index.end() ? -1 : it->second);
}

v1::ServerMessage Coordinator::Impl::RoundReadyFor(const Job& job,
                                                   int index) const {
  v1::ServerMessage msg;
  v1::RoundReady* r = msg.mutable_round_ready();
  r->set_round(job.round);
  const int n = static_cast<int>(job.members.size());
  if (index >= 0 && index < n) {
    r->set_group_rank(job.members[index].rank.group_rank);
    r->set_rank_offset(job.members[index].rank.rank_offset);
  }
  const std::vector<int> listed = RoundReadyPeerRanks(
      n, std::max(index, 0),
      static_cast<uint64_t>(job.round) ^ std::hash<std::string>()(job.id));
  r->set_peers_partial(static_cast<int>(listed.size()) < n);
  for (int i : listed) {
    const Member& m = job.members[i];
    v1::Peer* p = r->add_peers();
    p->set_node_id(m.rank.node_id);
    p->set_hostname(m.hostname);
    p->set_advertised_addr(m.advertised_addr);
    p->set_group_rank(m.rank.group_rank);
    p->set_local_world_size(m.rank.local_world_size);
    p->set_rank_offset(m.rank.rank_offset);
    p->set_reserved_port(m.master_port);
  }
  r->set_group_world_size(static_cast<int32_t>(n));
  r->set_world_size(job.world_size);
  if (!job.members.empty()) {
    const Member& master = job.members.front();
    // An agent that advertises nothing is reached by its hostname.
    r->set_master_addr(master.advertised_addr.empty() ? master.hostname
                                                      : master.advertised_addr);
    r->set_master_port(master.master_port);
  }
  r->set_store_prefix(StorePrefix(job.id, job.round));
  r->set_restart_count(job.restart_count);
  r->set_max_restarts(job.max_restarts);
  return msg;
}

void Coordinator::Impl::DropNamespace(const std::string& prefix) {
  if (options_.on_round_end) options_.on_round_end(prefix);
}

std::string Coordinator::Impl::JoinTimeoutCause(const Job& job) const {
  std::vector<std::string> joined;
  std::vector<std::string> not_rejoined;
  for (const auto& [id, node] : job.nodes) {
    std::string who = DescribeNode(node.join.hostname(), id);
    if (node.status == NodeStatus::kWaiting) {
      joined.push_back(std::move(who));
    } else {
      not_rejoined.push_back(std::move(who));
    }
  }
  std::string out = absl::StrCat(
      "only ", joined.size(), " of the ", job.min_nodes, " nodes needed (",
      NNodesFlag(job.min_nodes, job.max_nodes), ") joined round ", job.round,
      " within join_timeout ", FormatSeconds(job.join_timeout));
  if (!joined.empty())
    absl::StrAppend(&out, "; joined: ", absl::StrJoin(joined, ", "));
  if (!not_rejoined.empty()) {
    absl::StrAppend(&out, "; connected but not rejoined: ",
                    absl::StrJoin(not_rejoined, ", "));
  }
  if (!job.losses.empty())
    absl::StrAppend(&out, "; lost: ", absl::StrJoin(job.losses, "; "));
  return out;
}

// Job and node ids: what agents send and status prints; they appear in store
// prefixes ("<job>/<round>") and logs, so the grammar leaves out '/', spaces
// and control characters, and bounds the length.
namespace {
constexpr char kIdGrammar[] = "1 to 128 characters from A-Z a-z 0-9 . _ -";

bool IsValidId(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}
}  // namespace

// ---------- transitions

void Coordinator::Impl::OpenRound(Job& job) {
  job.state = JobState::kOpen;
  ++job.round;
  job.members.clear();
  job.member_index.clear();
  job.world_size = 0;
  job.succeeded.clear();
  job.join_deadline = clock_->Now() + job.join_timeout;
  job.last_call_deadline = absl::InfiniteFuture();
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": round " << job.round << " open ("
      << NNodesFlag(job.min_nodes, job.max_nodes) << ", " << job.WaitingCount()
      << " waiting, join_timeout " << FormatSeconds(job.join_timeout) << ")";
  CheckCount(job);
}

void Coordinator::Impl::AddWaiting(Job& job, Node& node) {
  job.SetStatus(node, NodeStatus::kWaiting);
  node.join_seq = job.next_join_seq++;
  job.awaited_survivors.erase(node.join.node_id());
  CheckCount(job, &node);
}

void Coordinator::Impl::CheckCount(Job& job, const Node* joiner) {
  if (job.adopting) {  // re-adoption: no round closes meanwhile
    SendWaitingToAll(job, joiner);
    return;
  }
  const int waiting = job.WaitingCount();
  if (waiting >= job.max_nodes) {
    CloseRound(job);
    return;
  }
  if (waiting >= job.min_nodes && job.reforming &&
      job.awaited_survivors.empty()) {
    MUSTER_LOG_AT(options_.event_log_level)
        << "job " << job.id << ": round " << job.round
        << ": every survivor is back; closing without last call";
    CloseRound(job);
    return;
  }
  bool threshold = false;  // min_nodes reached or lost: everyone hears it
  if (waiting >= job.min_nodes) {
    if (job.last_call_deadline == absl::InfiniteFuture()) {
      threshold = true;
      job.last_call_deadline = clock_->Now() + job.last_call_timeout;
      MUSTER_LOG_AT(options_.event_log_level)
          << "job " << job.id << ": round " << job.round << " has " << waiting
          << " of " << job.min_nodes << ".." << job.max_nodes
          << " nodes; last call ends in "
          << FormatSeconds(job.last_call_timeout);
    }
  } else {
    threshold = job.last_call_deadline != absl::InfiniteFuture();
    job.last_call_deadline = absl::InfiniteFuture();
  }
  SendWaitingToAll(job, joiner, threshold);
}

void Coordinator::Impl::CloseRound(Job& job) {
  // Candidates: survivors of the last round first (they keep their places),
  // then by arrival. More than max can wait when spares gathered while the last
  // round ran; the rest stay spares.
  std::map<std::string, int> previous_rank;
  for (size_t i = 0; i < job.previous_order.size(); ++i) {
    previous_rank.emplace(job.previous_order[i], static_cast<int>(i));
  }
  std::vector<std::tuple<int, int64_t, std::string>> candidates;
  for (const auto& [id, node] : job.nodes) {
    if (node.status != NodeStatus::kWaiting) continue;
    auto it = previous_rank.find(id);
    candidates.emplace_back(it == previous_rank.end()
                                ? std::numeric_limits<int>::max()
                                : it->second,
                            node.join_seq, id);
  }
  std::sort(candidates.begin(), candidates.end());
  if (candidates.size() > static_cast<size_t>(job.max_nodes))
    candidates.resize(job.max_nodes);

  std::vector<MemberSpec> specs;
  for (const auto& [prev, seq, id] : candidates) {
    const Node& node = job.nodes.at(id);
    specs.push_back(MemberSpec{.node_id = id,
                               .local_world_size = node.join.local_world_size(),
                               .node_rank_hint = node.join.node_rank_hint(),
                               .join_seq = node.join_seq});
  }
  absl::StatusOr<std::vector<RankAssignment>> ranks =
      AssignRanks(job.previous_order, specs);
  if (!ranks.ok()) {
    FailJob(job, absl::StrCat("round ", job.round,
                              " cannot form: ", ranks.status().message()));
    return;
  }

  job.state = JobState::kRunning;
  job.reforming = false;
  job.awaited_survivors.clear();
  job.join_deadline = absl::InfiniteFuture();
  job.last_call_deadline = absl::InfiniteFuture();
  job.members.clear();
  job.succeeded.clear();
  job.losses.clear();
  job.round_failures.clear();
  job.previous_order.clear();
  job.member_index.clear();
  int32_t world_size = 0;
  for (RankAssignment& r : *ranks) {
    Node& node = job.nodes.at(r.node_id);
    job.SetStatus(node, NodeStatus::kMember);
    world_size += r.local_world_size;
    job.member_index[r.node_id] = static_cast<int>(job.members.size());
    job.previous_order.push_back(r.node_id);
    job.members.push_back(Member{.rank = std::move(r),
                                 .hostname = node.join.hostname(),
                                 .advertised_addr = node.join.advertised_addr(),
                                 .master_port = node.join.master_port()});
  }
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": round " << job.round
      << " ready: " << job.members.size() << " nodes, " << world_size
      << " ranks, master " << job.members.front().advertised_addr << ":"
      << job.members.front().master_port;
  job.world_size = world_size;
  for (size_t i = 0; i < job.members.size(); ++i) {
    Send(job.nodes.at(job.members[i].rank.node_id).conn,
         RoundReadyFor(job, static_cast<int>(i)));
  }
  SendWaitingToAll(job);  // the spares left over, if any
}

void Coordinator::Impl::EndRound(Job& job, const std::string& reason,
                                 bool worker_failure) {
  if (worker_failure) {
    if (job.restart_count >= job.max_restarts) {
      // The root cause is the job's FIRST failure: later ones are often its
      // consequences.
      std::string cause = job.first_failure.has_value()
                              ? DescribeFailure(*job.first_failure)
                              : reason;
      MUSTER_LOG_AT(options_.event_log_level)
          << "job " << job.id << ": " << reason << "; no restarts left ("
          << job.restart_count << " of " << job.max_restarts << " used)";
      FailJob(job, cause);
      return;
    }
    ++job.restart_count;
  }
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": " << reason << "; restarting round "
      << job.round
      << (worker_failure
              ? absl::StrCat(" (restart ", job.restart_count, " of ",
                             job.max_restarts, ")")
              : std::string(" (membership change, no restart used)"));
  auto msg = std::make_shared<v1::ServerMessage>();
  v1::Restart* restart = msg->mutable_restart();
  restart->set_round(job.round);
  restart->set_reason(reason);
  restart->set_restart_count(job.restart_count);
  job.reforming = true;
  job.awaited_survivors.clear();
  std::shared_ptr<const v1::ServerMessage> shared = std::move(msg);
  for (auto& [id, node] : job.nodes) {
    if (node.status != NodeStatus::kMember) continue;
    Send(node.conn, shared);
    // It must stop its workers and Join again.
    job.SetStatus(node, NodeStatus::kPending);
    job.awaited_survivors.insert(id);
  }
  DropNamespace(StorePrefix(job.id, job.round));
  OpenRound(job);
}

void Coordinator::Impl::FailJob(Job& job, const std::string& root_cause) {
  const bool was_running = job.state == JobState::kRunning;
  job.state = JobState::kFailed;
  job.root_cause = root_cause;
  job.last_failure = root_cause;
  job.join_deadline = absl::InfiniteFuture();
  job.last_call_deadline = absl::InfiniteFuture();
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": FAILED in round " << job.round << ": "
      << root_cause;
  v1::ServerMessage msg;
  v1::JobFailed* failed = msg.mutable_job_failed();
  failed->set_root_cause(root_cause);
  if (job.first_failure.has_value())
    *failed->mutable_first_failure() = *job.first_failure;
  for (const v1::WorkerFailure& f : job.round_failures)
    *failed->add_failures() = f;
  SendFinalAndClose(job, msg);
  if (was_running) DropNamespace(StorePrefix(job.id, job.round));
  MaybeStartRetention(job);
}

void Coordinator::Impl::SucceedJob(Job& job) {
  job.state = JobState::kSucceeded;
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": SUCCEEDED in round " << job.round << " ("
      << job.members.size() << " nodes, " << job.restart_count << " restarts)";
  v1::ServerMessage msg;
  msg.mutable_job_succeeded()->set_round(job.round);
  SendFinalAndClose(job, msg);
  DropNamespace(StorePrefix(job.id, job.round));
  MaybeStartRetention(job);
}

void Coordinator::Impl::LoseNode(Job& job, const std::string& node_id,
                                 const std::string& why,
                                 std::optional<absl::Status> close_with) {
  auto it = job.nodes.find(node_id);
  if (it == job.nodes.end()) return;
  const NodeStatus status = it->second.status;
  const std::string who = DescribeNode(it->second.join.hostname(), node_id);
  auto c = conns_.find(it->second.conn);
  if (c != conns_.end()) {
    if (close_with.has_value() && !c->second.closed)
      outbox_.Close(c->second.channel, *close_with);
    conns_.erase(c);
  }
  job.EraseNode(it);
  job.awaited_survivors.erase(node_id);
  job.adopt_claims.erase(node_id);
  job.adopt_seen.erase(node_id);

  if (job.ended()) {
    MaybeStartRetention(job);
    return;
  }
  job.losses.push_back(absl::StrCat(who, ": ", why));
  switch (job.state) {
    case JobState::kOpen:
      MUSTER_LOG_AT(options_.event_log_level)
          << "job " << job.id << ": " << who << " lost (" << why
          << ") while round " << job.round << " was open";
      if (job.nodes.empty()) {
        // Nobody is left to run it, and nothing ran that status should
        // remember: forget it at the next Tick (a rejoin before then keeps
        // it). Thousands of abandoned jobs must not pile up in a shared
        // server.
        job.forget_at = clock_->Now();
        break;
      }
      if (status == NodeStatus::kWaiting) CheckCount(job);
      break;
    case JobState::kRunning:
      if (status == NodeStatus::kMember && !job.succeeded.contains(node_id)) {
        EndRound(job, absl::StrCat(who, " lost (", why, ")"),
                 /*worker_failure=*/false);
      } else {
        // A spare, a node that missed this round, or a member already done: the
        // round goes on.
        MUSTER_LOG_AT(options_.event_log_level)
            << "job " << job.id << ": " << who << " lost (" << why
            << "); round " << job.round << " carries on";
        if (status == NodeStatus::kWaiting) SendWaitingToAll(job);
      }
      break;
    case JobState::kSucceeded:
    case JobState::kFailed:
      break;
  }
}

void Coordinator::Impl::MaybeStartRetention(Job& job) {
  if (job.ended() && job.nodes.empty() &&
      job.forget_at == absl::InfiniteFuture()) {
    job.forget_at = clock_->Now() + options_.finished_job_retention;
  }
}

// ---------- re-adoption after a musterd restart (issue 11 item 4)

bool Coordinator::Impl::AdoptableClaim(const v1::Join& join) {
  if (!join.has_claim()) return false;
  const v1::RoundReady& r = join.claim().round();
  return (join.claim().workers_running() || join.claim().reported()) &&
         r.round() > 0 && r.group_world_size() > 0 && r.group_rank() >= 0 &&
         r.group_rank() < r.group_world_size() &&
         r.store_prefix() == StorePrefix(join.job_id(), r.round());
}

void Coordinator::Impl::StartAdoption(Job& job, const v1::Join& join) {
  job.state = JobState::kOpen;
  job.adopting = true;
  job.adopt_deadline = clock_->Now() + options_.adoption_grace;
  job.adopt_round = join.claim().round();
  job.adopt_round.clear_peers();
  job.adopt_claims.clear();
  job.adopt_seen.clear();
  job.adopt_broken.clear();
  job.round = job.adopt_round.round();
  job.restart_count = job.adopt_round.restart_count();
  job.join_deadline = absl::InfiniteFuture();
  job.last_call_deadline = absl::InfiniteFuture();
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": agents claim running round " << job.round
      << " (" << job.adopt_round.group_world_size()
      << " nodes); re-adopting it if every member is back within "
      << FormatSeconds(options_.adoption_grace);
}

void Coordinator::Impl::OnAdoptionJoin(Job& job, Node& node) {
  const v1::Join& join = node.join;
  const std::string& id = join.node_id();
  if (!join.has_claim() || join.claim().round().round() != job.round) {
    AddWaiting(job, node);  // a newcomer: the adoption goes on without it
    return;
  }
  const v1::RoundReady& r = join.claim().round();
  const v1::RoundReady& a = job.adopt_round;
  job.adopt_seen[id] = r.group_rank();
  std::string unfit;
  if (!AdoptableClaim(join)) {
    unfit = "its workers of the round stopped";
  } else if (r.group_world_size() != a.group_world_size() ||
             r.world_size() != a.world_size() ||
             r.master_addr() != a.master_addr() ||
             r.master_port() != a.master_port() ||
             r.restart_count() != a.restart_count()) {
    unfit = "it claims other sizes, master or restart count";
  } else {
    for (const auto& [other, c] : job.adopt_claims) {
      if (other != id && c.group_rank() == r.group_rank())
        unfit = absl::StrCat("node ", other, " claims its group rank too");
    }
  }
  if (unfit.empty()) {
    job.adopt_claims[id] = r;
    job.adopt_claims[id].clear_peers();
  } else {
    job.adopt_claims.erase(id);
    if (job.adopt_broken.empty()) {
      job.adopt_broken = absl::StrCat(DescribeNode(join.hostname(), id),
                                      " cannot run on: ", unfit);
    }
    // It waits for the next round (a candidate already, so the round that
    // opens counts it).
    if (node.status != NodeStatus::kWaiting) {
      job.SetStatus(node, NodeStatus::kWaiting);
      node.join_seq = job.next_join_seq++;
    }
  }
  // Once every member of the round is back: run it on, or form the next.
  if (static_cast<int>(job.adopt_seen.size()) < a.group_world_size()) return;
  if (job.adopt_broken.empty() &&
      static_cast<int>(job.adopt_claims.size()) == a.group_world_size()) {
    CompleteAdoption(job);
  } else {
    AbandonAdoption(job, job.adopt_broken);
  }
}

void Coordinator::Impl::CompleteAdoption(Job& job) {
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [id, c] : job.adopt_claims)
    order.emplace_back(c.group_rank(), id);
  std::sort(order.begin(), order.end());
  job.adopting = false;
  job.adopt_deadline = absl::InfiniteFuture();
  job.state = JobState::kRunning;
  job.members.clear();
  job.member_index.clear();
  job.previous_order.clear();
  job.succeeded.clear();
  job.losses.clear();
  job.round_failures.clear();
  for (const auto& [rank, id] : order) {
    Node& node = job.nodes.at(id);
    const v1::RoundReady& c = job.adopt_claims.at(id);
    job.SetStatus(node, NodeStatus::kMember);
    job.member_index[id] = static_cast<int>(job.members.size());
    job.previous_order.push_back(id);
    RankAssignment ra;
    ra.node_id = id;
    ra.group_rank = c.group_rank();
    ra.local_world_size = node.join.local_world_size();
    ra.rank_offset = c.rank_offset();
    job.members.push_back(Member{.rank = std::move(ra),
                                 .hostname = node.join.hostname(),
                                 .advertised_addr = node.join.advertised_addr(),
                                 .master_port = node.join.master_port()});
  }
  job.world_size = job.adopt_round.world_size();
  job.adopt_claims.clear();
  job.adopt_seen.clear();
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": round " << job.round << " re-adopted ("
      << job.members.size() << " nodes, " << job.world_size
      << " ranks): the workers run on";
  for (size_t i = 0; i < job.members.size(); ++i) {
    Send(job.nodes.at(job.members[i].rank.node_id).conn,
         RoundReadyFor(job, static_cast<int>(i)));
  }
  // Newcomers that came meanwhile scale the job up, as they would have.
  if (job.WaitingCount() > 0 &&
      static_cast<int>(job.members.size()) < job.max_nodes) {
    EndRound(job, "newcomers joined while the round was re-adopted",
             /*worker_failure=*/false);
  } else {
    SendWaitingToAll(job);
  }
}

void Coordinator::Impl::AbandonAdoption(Job& job, const std::string& why) {
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": cannot re-adopt round " << job.round << ": "
      << why << "; forming round " << job.round + 1;
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [id, rank] : job.adopt_seen) order.emplace_back(rank, id);
  std::sort(order.begin(), order.end());
  job.adopting = false;
  job.adopt_deadline = absl::InfiniteFuture();
  job.adopt_claims.clear();
  job.adopt_seen.clear();
  job.adopt_broken.clear();
  job.previous_order.clear();
  for (const auto& [rank, id] : order) {
    job.previous_order.push_back(id);
    Node& node = job.nodes.at(id);
    job.SetStatus(node, NodeStatus::kWaiting);
    node.join_seq = job.next_join_seq++;
  }
  // As after any lost member: the claimers that are back re-form at once
  // (with min_nodes), without last call.
  job.reforming = true;
  job.awaited_survivors.clear();
  DropNamespace(StorePrefix(job.id, job.round));
  OpenRound(job);
}

// ---------- events

absl::Status Coordinator::Impl::OnJoin(ConnectionId conn, const v1::Join& join,
                                       std::shared_ptr<AgentChannel> channel) {
  // Malformed Joins are refused before any state is touched.
  if (join.job_id().empty()) {
    return absl::InvalidArgumentError("Join: job_id is empty; pass --rdzv-id");
  }
  if (!IsValidId(join.job_id())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join: job_id '", absl::CHexEscape(join.job_id().substr(0, 64)),
        join.job_id().size() > 64 ? "...' (" : "' (", join.job_id().size(),
        " bytes) is not a valid id: ", kIdGrammar, " (--rdzv-id)"));
  }
  if (join.node_id().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Join for job ", join.job_id(), ": node_id is empty"));
  }
  if (!IsValidId(join.node_id())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Join for job ", join.job_id(), ": node_id '",
        absl::CHexEscape(join.node_id().substr(0, 64)),
        join.node_id().size() > 64 ? "...' (" : "' (", join.node_id().size(),
        " bytes) is not a valid id: ", kIdGrammar));
  }
  const std::string ctx = absl::StrCat("Join of node ", join.node_id(),
                                       " for job ", join.job_id(), ": ");
  if (join.local_world_size() < 1 ||
      join.local_world_size() > kMaxLocalWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx, "local_world_size is ", join.local_world_size(),
        "; --nproc-per-node must be from 1 to ", kMaxLocalWorldSize));
  }
  if (int64_t{join.local_world_size()} * join.max_nodes() > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx, join.max_nodes(), " nodes of ",
                     join.local_world_size(), " workers would make a world of ",
                     int64_t{join.local_world_size()} * join.max_nodes(),
                     " ranks, above the limit of ", kMaxWorldSize,
                     "; lower --nnodes or --nproc-per-node"));
  }
  if (join.min_nodes() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx, "min_nodes is ", join.min_nodes(),
                     "; --nnodes must be at least 1"));
  }
  if (join.max_nodes() < join.min_nodes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx, "max_nodes ", join.max_nodes(), " is less than min_nodes ",
        join.min_nodes(), "; --nnodes=MIN:MAX needs MIN <= MAX"));
  }
  if (join.max_restarts() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx, "max_restarts is ", join.max_restarts(),
                     "; --max-restarts must be >= 0"));
  }
  if (join.node_rank_hint() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx, "node_rank_hint is ", join.node_rank_hint(),
                     "; use -1 for none or a rank >= 0"));
  }
  if (join.join_timeout_ms() < 0 || join.last_call_timeout_ms() < 0 ||
      join.heartbeat_timeout_ms() < 0 || join.heartbeat_interval_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx, "timeouts must be >= 0 ms (0 = the server's default)"));
  }
  absl::Duration lease;
  if (absl::Status s = LeaseOfJoin(join.lease_timeout_ms(),
                                   options_.default_lease_timeout, &lease);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(ctx, s.message()));
  }
  if (channel == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(ctx, "no channel"));

  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();

  // A stream serves one node of one job for its whole life.
  if (auto c = conns_.find(conn); c != conns_.end()) {
    if (c->second.job_id != join.job_id() ||
        c->second.node_id != join.node_id()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ctx, "this session already belongs to node ",
                       c->second.node_id, " of job ", c->second.job_id,
                       "; open a new session for another job or node"));
    }
  }

  auto [job_it, created] = jobs_.try_emplace(join.job_id());
  Job& job = job_it->second;
  if (!created && job.ended() && job.verdict.has_value() &&
      job.verdict_nodes.contains(join.node_id())) {
    // A node of the ended job that missed the verdict (its session broke as
    // the job ended) reconnects: it hears the verdict. A rerun of the command
    // comes with new node ids.
    MUSTER_LOG_AT(options_.event_log_level)
        << "job " << job.id << ": "
        << DescribeNode(join.hostname(), join.node_id())
        << " reconnected after the end; sending the verdict ("
        << JobStateName(job.state) << ") again";
    outbox_.Send(channel,
                 std::make_shared<const v1::ServerMessage>(*job.verdict));
    outbox_.Close(std::move(channel), absl::OkStatus());
    return absl::OkStatus();
  }
  const bool rerun = !created && job.ended();
  if (rerun && !job.nodes.empty()) {
    // Transient: the ended run's agents leave within a heartbeat timeout.
    // UNAVAILABLE makes the agent retry (Reconnect), as for a server restart.
    return absl::UnavailableError(absl::StrCat(
        "job ", job.id, " has just ended (", JobStateName(job.state),
        "); its agents are still disconnecting — this node joins again "
        "shortly (or use another --rdzv-id)"));
  }
  // An OPEN job whose agents all left (forgotten at the next Tick) starts
  // afresh too: nobody is there to disagree with.
  const bool abandoned =
      !created && job.state == JobState::kOpen && job.nodes.empty();
  if (!created && !rerun && !abandoned &&
      (job.min_nodes != join.min_nodes() || job.max_nodes != join.max_nodes() ||
       job.max_restarts != join.max_restarts())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id, ": node ", join.node_id(), " asks for ",
        NNodesFlag(join.min_nodes(), join.max_nodes()), " --max-restarts=",
        join.max_restarts(), " but the job was started with ",
        NNodesFlag(job.min_nodes, job.max_nodes),
        " --max-restarts=", job.max_restarts,
        "; give every node the same --nnodes and --max-restarts, or use "
        "another --rdzv-id"));
  }
  if (!created && !rerun && !abandoned) {
    absl::Status taken = CheckSessionSecret(job, conn, join);
    if (!taken.ok()) return taken;
  }
  if (created || rerun || abandoned) {
    // A fresh job, or a rerun: everything but the round counter starts over, so
    // a rerun's store prefixes never repeat those of the previous run.
    const int64_t last_round = created ? 0 : job.round;
    job = Job{};
    job.id = join.job_id();
    job.round = last_round;
    job.min_nodes = join.min_nodes();
    job.max_nodes = join.max_nodes();
    job.max_restarts = join.max_restarts();
    job.join_timeout =
        MillisOr(join.join_timeout_ms(), options_.default_join_timeout);
    job.last_call_timeout = MillisOr(join.last_call_timeout_ms(),
                                     options_.default_last_call_timeout);
    MUSTER_LOG_AT(options_.event_log_level)
        << "job " << job.id << ": " << (rerun ? "rerun" : "new") << " ("
        << NNodesFlag(job.min_nodes, job.max_nodes)
        << " --max-restarts=" << job.max_restarts << ")";
  }

  // Register (or refresh) the connection; a Join counts as a heartbeat.
  Connection& c = conns_[conn];
  c.channel = std::move(channel);
  c.job_id = job.id;
  c.node_id = join.node_id();
  c.last_seen = now;
  // Lease fencing: a silent node is not lost before its lease has passed.
  c.lease = lease;
  c.last_lease_ack = now;  // the Join's own LeaseRenewed (session_service.cc)
  c.heartbeat_timeout = SilentLossTimeout(
      MillisOr(join.heartbeat_timeout_ms(), options_.default_heartbeat_timeout),
      lease);
  c.heartbeat_interval_ms = join.heartbeat_interval_ms();
  c.closed = false;
  heartbeats_.Arm(conn, now + c.heartbeat_timeout);

  auto [node_it, new_node] = job.nodes.try_emplace(join.node_id());
  Node& node = node_it->second;
  const std::string who = DescribeNode(join.hostname(), join.node_id());
  if (!new_node && node.conn != conn) {
    // Reconnect: the newer session of a node wins; the old stream is most
    // likely dead already.
    if (auto old = conns_.find(node.conn); old != conns_.end()) {
      if (!old->second.closed) {
        outbox_.Close(
            old->second.channel,
            absl::AbortedError("replaced by a new session of the same node"));
      }
      conns_.erase(old);
    }
    MUSTER_LOG_AT(options_.event_log_level)
        << "job " << job.id << ": " << who << " reconnected";
  }
  node.join = join;
  node.join.clear_session_secret();  // kept only as a digest
  if (!node.session_digest.has_value() && !join.session_secret().empty())
    node.session_digest = HashSecret(join.session_secret());
  node.conn = conn;

  if (created || rerun || abandoned) {
    job.reforming = false;
    job.awaited_survivors.clear();
    if (join.has_claim()) {
      // Rounds go on from the claimed one: store prefixes never repeat.
      job.round = std::max(job.round, join.claim().round().round());
    }
    if (created && AdoptableClaim(join)) {
      StartAdoption(job, join);  // a restarted musterd: re-adopt the round
    } else {
      OpenRound(job);  // round 1 (or the next), with no one waiting yet
    }
  }
  if (job.adopting && job.state == JobState::kOpen &&
      node.status != NodeStatus::kWaiting) {
    OnAdoptionJoin(job, node);
    return absl::OkStatus();
  }
  switch (job.state) {
    case JobState::kOpen:
      if (node.status == NodeStatus::kWaiting) {
        // A repeated Join or a reconnect: only the stream changed.
        SendWaiting(job, node);
      } else {
        // One line per node is what a person reads for a few nodes; for
        // thousands it is noise written under the lock (the round's own lines
        // say how many joined).
        MUSTER_LOG_AT(job.max_nodes > kWaitingAtOnceMax
                          ? LogLevel::kDebug
                          : options_.event_log_level)
            << "job " << job.id << ": " << who << " joined round " << job.round;
        AddWaiting(job, node);
      }
      break;
    case JobState::kRunning:
      if (node.status == NodeStatus::kMember && join.has_claim() &&
          join.claim().round().round() == job.round &&
          !join.claim().workers_running() && !join.claim().reported()) {
        // Lease fencing: its workers of this round were stopped while it was
        // cut off (or died with its session): the round cannot go on.
        EndRound(job,
                 absl::StrCat(who, " stopped its workers of round ", job.round,
                              " (lease fence: its lease was not renewed)"),
                 /*worker_failure=*/false);
      } else if (node.status == NodeStatus::kMember) {
        // The node carries on in the round it belongs to: tell it the round
        // again.
        Send(conn, MakeRoundReady(job, node_it->first));
      } else if (node.status == NodeStatus::kWaiting) {
        SendWaiting(job, node);
      } else if (static_cast<int>(job.members.size()) < job.max_nodes &&
                 job.succeeded.empty()) {
        job.SetStatus(node, NodeStatus::kWaiting);
        node.join_seq = job.next_join_seq++;
        EndRound(
            job,
            absl::StrCat(who, " joined; scaling up from ", job.members.size(),
                         " nodes (max ", job.max_nodes, ")"),
            /*worker_failure=*/false);
      } else {
        // At max, or finishing: once a member's workers have all succeeded, a
        // scale-up would make every node run the finished work again.
        MUSTER_LOG_AT(options_.event_log_level)
            << "job " << job.id << ": " << who << " waits as a spare (round "
            << job.round
            << (job.succeeded.empty()
                    ? absl::StrCat(" runs at max ", job.max_nodes, " nodes)")
                    : absl::StrCat(" is finishing: ", job.succeeded.size(),
                                   " of ", job.members.size(),
                                   " nodes succeeded)"));
        job.SetStatus(node, NodeStatus::kWaiting);
        node.join_seq = job.next_join_seq++;
        SendWaitingToAll(job, &node);
      }
      break;
    case JobState::kSucceeded:
    case JobState::kFailed:
      break;  // unreachable: an ended job was refused or restarted above
  }
  return absl::OkStatus();
}

bool Coordinator::Impl::OnHeartbeat(ConnectionId conn) {
  absl::ReaderMutexLock lock(&mu_);
  TouchShared(conn);
  // Lease fencing: renew while the node is counted alive (a stream the
  // server has ended renews nothing). One stream's events come one at a
  // time, so the plain store below does not race with itself.
  auto c = conns_.find(conn);
  if (c == conns_.end() || c->second.closed) return false;
  const absl::Time now = clock_->Now();
  if (!LeaseAckDue(now, c->second.last_lease_ack.Get(), c->second.lease))
    return false;
  c->second.last_lease_ack = now;
  return true;
}

void Coordinator::Impl::OnWorkersFailed(ConnectionId conn,
                                        const v1::WorkersFailed& report) {
  absl::MutexLock lock(&mu_);
  Touch(conn);
  auto [job, node] = CurrentMember(conn, report.round(), "failure report");
  if (job == nullptr) return;
  // A stream speaks only for its own node: whatever node the report names,
  // its failures are this node's.
  v1::WorkersFailed failed = report;
  for (v1::WorkerFailure& f : *failed.mutable_failures()) {
    f.set_node_id(node->join.node_id());
    f.set_hostname(node->join.hostname());
  }
  for (const v1::WorkerFailure& f : failed.failures())
    job->round_failures.push_back(f);
  std::string reason;
  if (const v1::WorkerFailure* first = EarliestFailure(failed);
      first != nullptr) {
    reason = DescribeFailure(*first);
    if (!job->first_failure.has_value()) job->first_failure = *first;
  } else {
    reason =
        absl::StrCat("a worker on ",
                     DescribeNode(node->join.hostname(), node->join.node_id()),
                     " failed (no details reported)");
  }
  job->last_failure = reason;
  EndRound(*job, reason, /*worker_failure=*/true);
}

// A blocked pair of nodes will not heal by restarting: the job fails at once,
// naming both nodes, the port and the likely cause, before any worker waits in
// a collective.
void Coordinator::Impl::OnPreflightFailed(ConnectionId conn,
                                          const v1::PreflightFailed& failed) {
  absl::MutexLock lock(&mu_);
  Touch(conn);
  auto [job, node] = CurrentMember(conn, failed.round(), "preflight report");
  if (job == nullptr) return;
  std::string cause =
      absl::StrCat("preflight of round ", failed.round(), ": ",
                   DescribeNode(node->join.hostname(), node->join.node_id()),
                   " (", node->join.advertised_addr(), ") cannot reach ",
                   DescribeNode(failed.peer_hostname(), failed.peer_node_id()),
                   " (", failed.peer_address(), ") on TCP port ", failed.port(),
                   ": ", failed.outcome(), ". ", failed.explanation());
  FailJob(*job, cause);
}

void Coordinator::Impl::OnWorkersSucceeded(
    ConnectionId conn, const v1::WorkersSucceeded& succeeded) {
  absl::MutexLock lock(&mu_);
  Touch(conn);
  auto [job, node] = CurrentMember(conn, succeeded.round(), "success report");
  if (job == nullptr) return;
  job->succeeded.insert(node->join.node_id());
  if (job->succeeded.size() == job->members.size()) SucceedJob(*job);
}

void Coordinator::Impl::OnLeave(ConnectionId conn, const v1::Leave& leave) {
  absl::MutexLock lock(&mu_);
  auto [job, node] = Find(conn);
  if (job == nullptr || node == nullptr) {
    conns_.erase(conn);
    return;
  }
  const std::string node_id = node->join.node_id();
  LoseNode(*job, node_id,
           leave.reason().empty() ? std::string("left")
                                  : absl::StrCat("left: ", leave.reason()),
           absl::OkStatus());
}

void Coordinator::Impl::OnDisconnect(ConnectionId conn) {
  absl::MutexLock lock(&mu_);
  auto [job, node] = Find(conn);
  if (job == nullptr || node == nullptr) {
    conns_.erase(conn);
    return;
  }
  const std::string node_id = node->join.node_id();
  LoseNode(*job, node_id, "stream closed", std::nullopt);
}

absl::Time Coordinator::Impl::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();

  // Missed heartbeats first: a node that is gone should not be counted into a
  // round that closes at this same instant.
  // From the deadline queue: only connections whose deadline came due are
  // looked at, not every connection on every tick.
  auto heartbeat_deadline =
      [this](ConnectionId id)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::optional<absl::Time> {
    auto c = conns_.find(id);
    if (c == conns_.end()) return std::nullopt;
    return c->second.last_seen.Get() + c->second.heartbeat_timeout;
  };
  std::vector<ConnectionId> expired;
  heartbeats_.PopExpired(now, heartbeat_deadline, &expired);
  std::sort(expired.begin(), expired.end());  // deterministic order of losses
  for (ConnectionId id : expired) {
    auto c = conns_.find(id);
    if (c == conns_.end()) continue;  // removed by an earlier loss in this loop
    auto [job, node] = Find(id);
    if (job == nullptr || node == nullptr) {
      conns_.erase(c);
      continue;
    }
    const std::string timeout = FormatSeconds(c->second.heartbeat_timeout);
    std::string why = absl::StrCat("no heartbeat for ", timeout);
    std::string detail = absl::StrCat(
        "musterd heard nothing from ",
        DescribeNode(node->join.hostname(), node->join.node_id()), " for ",
        timeout, " (heartbeat_timeout, or the lease when longer)");
    if (c->second.heartbeat_interval_ms > 0) {
      const int64_t missed =
          absl::ToInt64Milliseconds(c->second.heartbeat_timeout) /
          c->second.heartbeat_interval_ms;
      absl::StrAppend(&why, ", ", missed, " heartbeats missed");
      absl::StrAppend(&detail, ": ", missed,
                      " heartbeats missed at an interval of ",
                      c->second.heartbeat_interval_ms, "ms");
    } else {
      absl::StrAppend(&detail, ": heartbeats missed");
    }
    absl::StrAppend(&detail, "; the node is treated as lost");
    const std::string node_id = node->join.node_id();
    LoseNode(*job, node_id, why, absl::UnavailableError(detail));
  }

  // Round timers and retention.
  std::vector<std::string> forget;
  for (auto& [id, job] : jobs_) {
    if (job.adopting && job.adopt_deadline <= now) {
      AbandonAdoption(job,
                      absl::StrCat("not every member of round ", job.round,
                                   " came back within ",
                                   FormatSeconds(options_.adoption_grace)));
    }
    if (job.waiting_flush_at <= now) SendWaitingToAll(job);  // coalesced
    if (job.state == JobState::kOpen) {
      const int waiting = job.WaitingCount();
      if (waiting >= job.min_nodes &&
          (job.last_call_deadline <= now || job.join_deadline <= now)) {
        MUSTER_LOG_AT(options_.event_log_level)
            << "job " << id << ": round " << job.round << " closes with "
            << waiting << " nodes ("
            << (job.last_call_deadline <= now ? "last call" : "join_timeout")
            << " passed)";
        CloseRound(job);
      } else if (job.join_deadline <= now) {
        FailJob(job, JoinTimeoutCause(job));
      }
      if (job.state == JobState::kOpen && job.nodes.empty() &&
          job.forget_at <= now) {
        forget.push_back(id);
      }
    } else if (job.ended() && job.forget_at <= now) {
      forget.push_back(id);
    }
  }
  // At most max_finished_jobs ended jobs are kept for status: the oldest go
  // first.
  std::vector<std::pair<absl::Time, std::string>> kept;
  for (const auto& [id, job] : jobs_) {
    if (job.ended() && job.nodes.empty() && job.forget_at > now) {
      kept.emplace_back(job.forget_at, id);
    }
  }
  if (kept.size() > static_cast<size_t>(options_.max_finished_jobs)) {
    const size_t extra = kept.size() - options_.max_finished_jobs;
    std::nth_element(kept.begin(), kept.begin() + extra, kept.end());
    for (size_t i = 0; i < extra; ++i) forget.push_back(kept[i].second);
  }
  for (const std::string& id : forget) {
    MUSTER_LOG_AT(options_.event_log_level)
        << "job " << id << ": forgotten (" << JobStateName(jobs_.at(id).state)
        << (jobs_.at(id).ended() ? ", retention passed or too many kept)"
                                 : ", no agent left)");
    jobs_.erase(id);
    DropNamespace(absl::StrCat(id, "/"));
  }

  absl::Time next = heartbeats_.Next(heartbeat_deadline);
  for (const auto& [id, job] : jobs_) {
    next = std::min(next, job.waiting_flush_at);
    if (job.adopting) next = std::min(next, job.adopt_deadline);
    if (job.state == JobState::kOpen) {
      next = std::min({next, job.join_deadline, job.last_call_deadline});
    } else if (job.ended()) {
      next = std::min(next, job.forget_at);
    }
  }
  return next;
}

v1::GetStatusResponse Coordinator::Impl::Status(
    absl::string_view job_id) const {
  absl::MutexLock lock(&mu_);
  v1::GetStatusResponse out;
  for (const auto& [id, job] : jobs_) {
    if (!job_id.empty() && id != job_id) continue;
    if (job.state == JobState::kOpen && job.nodes.empty()) continue;  // Gone.
    v1::JobStatus* s = out.add_jobs();
    s->set_job_id(id);
    s->set_state(std::string(JobStateName(job.state)));
    s->set_round(job.round);
    s->set_min_nodes(job.min_nodes);
    s->set_max_nodes(job.max_nodes);
    s->set_restart_count(job.restart_count);
    s->set_max_restarts(job.max_restarts);
    s->set_last_failure(job.last_failure);
    for (const Member& m : job.members) {
      v1::Peer* p = s->add_members();
      p->set_node_id(m.rank.node_id);
      p->set_hostname(m.hostname);
      p->set_advertised_addr(m.advertised_addr);
      p->set_group_rank(m.rank.group_rank);
      p->set_local_world_size(m.rank.local_world_size);
      p->set_rank_offset(m.rank.rank_offset);
    }
    std::vector<const Node*> waiting;
    for (const auto& [nid, node] : job.nodes) {
      if (node.status == NodeStatus::kWaiting) waiting.push_back(&node);
    }
    std::sort(waiting.begin(), waiting.end(), [](const Node* a, const Node* b) {
      return a->join_seq < b->join_seq;
    });
    for (const Node* node : waiting) {
      v1::Peer* p = s->add_waiting();
      p->set_node_id(node->join.node_id());
      p->set_hostname(node->join.hostname());
      p->set_advertised_addr(node->join.advertised_addr());
      p->set_group_rank(-1);  // not assigned until a round forms
      p->set_local_world_size(node->join.local_world_size());
      p->set_rank_offset(-1);
    }
  }
  return out;
}

int64_t Coordinator::Impl::ConnectedAgents() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(conns_.size());
}

int64_t Coordinator::Impl::JobCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(jobs_.size());
}

// ---------- Coordinator

Coordinator::Coordinator(CoordinatorOptions options, Clock* clock)
    : impl_(std::make_unique<Impl>(std::move(options), clock)) {}
Coordinator::~Coordinator() = default;

// Each event's messages are written after the Coordinator's lock is released
// (Outbox), before the call returns unless another thread is writing them.
absl::Status Coordinator::OnJoin(ConnectionId conn, const v1::Join& join,
                                 std::shared_ptr<AgentChannel> channel) {
  absl::Status status = impl_->OnJoin(conn, join, std::move(channel));
  impl_->Flush();
  return status;
}
bool Coordinator::OnHeartbeat(ConnectionId conn,
                              const v1::Heartbeat& heartbeat) {
  // The round it names is informational: any message proves liveness. A
  // heartbeat queues nothing (the adapter writes LeaseRenewed itself), so
  // there is nothing to flush.
  (void)heartbeat;
  return impl_->OnHeartbeat(conn);
}
void Coordinator::OnPreflightFailed(ConnectionId conn,
                                    const v1::PreflightFailed& failed) {
  impl_->OnPreflightFailed(conn, failed);
  impl_->Flush();
}

void Coordinator::OnWorkersFailed(ConnectionId conn,
                                  const v1::WorkersFailed& failed) {
  impl_->OnWorkersFailed(conn, failed);
  impl_->Flush();
}
void Coordinator::OnWorkersSucceeded(ConnectionId conn,
                                     const v1::WorkersSucceeded& succeeded) {
  impl_->OnWorkersSucceeded(conn, succeeded);
  impl_->Flush();
}
void Coordinator::OnLeave(ConnectionId conn, const v1::Leave& leave) {
  impl_->OnLeave(conn, leave);
  impl_->Flush();
}
void Coordinator::OnDisconnect(ConnectionId conn) {
  impl_->OnDisconnect(conn);
  impl_->Flush();
}
absl::Time Coordinator::Tick() {
  const absl::Time next = impl_->Tick();
  impl_->Flush();
  return next;
}
v1::GetStatusResponse Coordinator::Status(absl::string_view job_id) const {
  return impl_->Status(job_id);
}
int64_t Coordinator::ConnectedAgents() const {
  return impl_->ConnectedAgents();
}
int64_t Coordinator::JobCount() const { return impl_->JobCount(); }

void Coordinator::DrainOutbox() { impl_->Drain(); }

}  // namespace muster::rendezvous
