// Join admission, in four steps (OnJoin, at the end): validate (before any
// state is touched), admit (create, rerun or join the job), register (the
// stream and the node), dispatch (place the node by the job's state).
// coordinator_internal.h lists the other parts.
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "muster/common/ids.h"
#include "muster/common/logging.h"
#include "muster/rendezvous/auth.h"
#include "rendezvous/src/core/coordinator_internal.h"

namespace muster::rendezvous {

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

namespace {

// "Join of node n for job j: ", the start of a refusal's message.
std::string JoinContext(const v1::Join& join) {
  return absl::StrCat("Join of node ", join.node_id(), " for job ",
                      join.job_id(), ": ");
}

// The job and node ids: present, and of the form ids.h allows.
absl::Status ValidateJoinIds(const v1::Join& join) {
  if (join.job_id().empty()) {
    return absl::InvalidArgumentError("Join: job_id is empty; pass --rdzv-id");
  }
  if (absl::Status s = ValidateId("Join: job_id", join.job_id(),
                                  "choose another --rdzv-id, e.g. job-42");
      !s.ok()) {
    return s;
  }
  if (join.node_id().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Join for job ", join.job_id(), ": node_id is empty"));
  }
  return ValidateId(absl::StrCat("Join for job ", join.job_id(), ": node_id"),
                    join.node_id(), "give the agent a node id of that form");
}

// Sizes, restarts, the rank hint and the timeouts: each within its bounds.
absl::Status ValidateJoinLimits(const v1::Join& join) {
  const std::string ctx = JoinContext(join);
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
  return absl::OkStatus();
}

}  // namespace

absl::Status Coordinator::Impl::ValidateJoin(
    const v1::Join& join, const std::shared_ptr<AgentChannel>& channel,
    absl::Duration* lease) const {
  if (absl::Status s = ValidateJoinIds(join); !s.ok()) return s;
  if (absl::Status s = ValidateJoinLimits(join); !s.ok()) return s;
  if (absl::Status s = LeaseOfJoin(join.lease_timeout_ms(),
                                   options_.default_lease_timeout, lease);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(JoinContext(join), s.message()));
  }
  if (absl::Status s = ValidateStragglerPolicy(join); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(JoinContext(join), s.message()));
  }
  if (channel == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat(JoinContext(join), "no channel"));
  return absl::OkStatus();
}

absl::StatusOr<Coordinator::Impl::Admission> Coordinator::Impl::AdmitJoin(
    ConnectionId conn, const v1::Join& join,
    std::shared_ptr<AgentChannel>& channel) {
  // A stream serves one node of one job for its whole life.
  if (auto c = conns_.find(conn); c != conns_.end()) {
    if (c->second.job_id != join.job_id() ||
        c->second.node_id != join.node_id()) {
      return absl::InvalidArgumentError(absl::StrCat(
          JoinContext(join), "this session already belongs to node ",
          c->second.node_id, " of job ", c->second.job_id,
          "; open a new session for another job or node"));
    }
  }

  auto [job_it, created] = jobs_.try_emplace(join.job_id());
  Job& job = job_it->second;
  Admission admission{.job = &job, .created = created};
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
    admission.answered = true;
    return admission;
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
  admission.fresh = created || rerun || abandoned;
  if (admission.fresh) {
    StartJobAfresh(job, join, created, rerun);
    return admission;
  }
  if (job.min_nodes != join.min_nodes() || job.max_nodes != join.max_nodes() ||
      job.max_restarts != join.max_restarts()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id, ": node ", join.node_id(), " asks for ",
        NNodesFlag(join.min_nodes(), join.max_nodes()), " --max-restarts=",
        join.max_restarts(), " but the job was started with ",
        NNodesFlag(job.min_nodes, job.max_nodes),
        " --max-restarts=", job.max_restarts,
        "; give every node the same --nnodes and --max-restarts, or use "
        "another --rdzv-id"));
  }
  absl::Status taken = CheckSessionSecret(job, conn, join);
  if (!taken.ok()) return taken;
  return admission;
}

void Coordinator::Impl::StartJobAfresh(Job& job, const v1::Join& join,
                                       bool created, bool rerun) {
  // A fresh job, or a rerun: everything but the round counter starts over, so
  // a rerun's store prefixes never repeat those of the previous run.
  if (!created) Transition(job, JobPhase::kOpen, rerun ? "rerun" : "afresh");
  const int64_t last_round = created ? 0 : job.round;
  job = Job{};  // OPEN, as the transition above left it
  job.id = join.job_id();
  job.round = last_round;
  if (auto r = resumed_.find(join.job_id()); created && r != resumed_.end()) {
    // A restarted musterd: rounds and restarts go on from its journal.
    job.round = r->second.first;
    job.restart_count = job.resumed_restart_count = r->second.second;
    resumed_.erase(r);
  }
  job.min_nodes = join.min_nodes();
  job.max_nodes = join.max_nodes();
  job.max_restarts = join.max_restarts();
  job.join_timeout =
      MillisOr(join.join_timeout_ms(), options_.default_join_timeout);
  job.last_call_timeout =
      MillisOr(join.last_call_timeout_ms(), options_.default_last_call_timeout);
  job.worker_timeout = MillisOr(join.worker_timeout_ms(), absl::ZeroDuration());
  TakeStragglerPolicy(job, join);
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": " << (rerun ? "rerun" : "new") << " ("
      << NNodesFlag(job.min_nodes, job.max_nodes)
      << " --max-restarts=" << job.max_restarts << ")";
}

void Coordinator::Impl::RegisterStream(ConnectionId conn, const v1::Join& join,
                                       std::shared_ptr<AgentChannel> channel,
                                       absl::Duration lease, absl::Time now) {
  // Register (or refresh) the connection; a Join counts as a heartbeat.
  Connection& c = conns_[conn];
  UpdateHeartbeatSuggestion();
  c.channel = std::move(channel);
  c.job_id = join.job_id();
  c.node_id = join.node_id();
  liveness_.Set(conn, now);
  // Lease fencing: a silent node is not lost before its lease has passed. A
  // Join with a lease_seq is answered with its own LeaseRenewed
  // (session_stream.cc) unless the agent waits for its round's RoundReady to
  // renew it. A rejoin after Restart carries none: it must not put the next
  // renewal off, or rounds that re-form faster than lease/4 starve the lease
  // and the agent fences workers that were fine (found by
  // tests/e2e/chaos_e2e_test.cc). Renewals go on only while its workers run
  // (a claim of running workers, then its RoundReady), or for an older
  // agent (lease.h).
  c.lease = lease;
  auto set_lease = [&](StreamLease& l) {
    l.lease_ms = absl::ToInt64Milliseconds(lease);
    l.in_round = join.has_claim() && join.claim().workers_running();
    l.renew_waiting = !join.lease_from_round_ready();
    if (join.lease_seq() != 0) {
      l.last_seq = join.lease_seq();
      l.due = FirstLeaseRenewal(now, lease);
    }
    return true;
  };
  if (!leases_.Visit(conn, set_lease).has_value()) {
    StreamLease l;
    set_lease(l);
    l.due = FirstLeaseRenewal(now, lease);
    leases_.Set(conn, l);
  }
  // The heartbeat budget counts the job's size (its share, not the
  // server-wide figure of the moment, which LeaseRenewed adds when it goes).
  job_suggestion_.Set(
      conn, absl::UnixEpoch() +
                rendezvous::SuggestedHeartbeatInterval(
                    join.max_nodes(), options_.heartbeat_budget_per_second));
  c.heartbeat_timeout = SilentLossTimeout(
      MillisOr(join.heartbeat_timeout_ms(), options_.default_heartbeat_timeout),
      lease);
  c.heartbeat_interval_ms = join.heartbeat_interval_ms();
  c.closed = false;
  heartbeats_.Arm(conn, now + c.heartbeat_timeout);
}

Node& Coordinator::Impl::RegisterNode(Job& job, ConnectionId conn,
                                      const v1::Join& join) {
  auto [node_it, new_node] = job.nodes.try_emplace(join.node_id());
  Node& node = node_it->second;
  if (!new_node && node.conn != conn) {
    // Reconnect: the newer session of a node wins; the old stream is most
    // likely dead already.
    if (auto old = conns_.find(node.conn); old != conns_.end()) {
      if (!old->second.closed) {
        outbox_.Close(
            old->second.channel,
            absl::AbortedError("replaced by a new session of the same node"));
      }
      EraseConnection(old);
    }
    MUSTER_LOG_AT(options_.event_log_level)
        << "job " << job.id << ": "
        << DescribeNode(join.hostname(), join.node_id()) << " reconnected";
  }
  node.join = join;
  node.join.clear_session_secret();  // kept only as a digest
  if (!node.session_digest.has_value() && !join.session_secret().empty())
    node.session_digest = HashSecret(join.session_secret());
  node.conn = conn;
  return node;
}

void Coordinator::Impl::OpenFirstRound(Job& job, const v1::Join& join,
                                       bool created) {
  job.reforming = false;
  job.awaited_survivors.clear();
  if (join.has_claim()) {
    // Rounds go on from the claimed one: store prefixes never repeat.
    job.round = std::max(job.round, join.claim().round().round());
    if (created) {
      // And restarts from the claimed round's count: the journal is written
      // at most every 200 ms and may not have it yet.
      job.restart_count = job.resumed_restart_count =
          std::max(job.restart_count, join.claim().round().restart_count());
    }
  }
  if (created && AdoptableClaim(join)) {
    StartAdoption(job, join);  // a restarted musterd: re-adopt the round
  } else {
    OpenRound(job);  // round 1 (or the next), with no one waiting yet
  }
}

void Coordinator::Impl::DispatchJoin(Job& job, Node& node, ConnectionId conn,
                                     const v1::Join& join) {
  if (job.adopting && job.state == JobState::kOpen &&
      node.status != NodeStatus::kWaiting) {
    OnAdoptionJoin(job, node);
    return;
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
            << "job " << job.id << ": "
            << DescribeNode(join.hostname(), join.node_id()) << " joined round "
            << job.round;
        AddWaiting(job, node);
      }
      break;
    case JobState::kRunning:
      JoinRunningRound(job, node, conn, join);
      break;
    case JobState::kSucceeded:
    case JobState::kFailed:
      break;  // unreachable: an ended job was refused or restarted above
  }
}

void Coordinator::Impl::JoinRunningRound(Job& job, Node& node,
                                         ConnectionId conn,
                                         const v1::Join& join) {
  const std::string who = DescribeNode(join.hostname(), join.node_id());
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
    SendRoundReady(conn, MakeRoundReady(job, join.node_id()));
  } else if (node.status == NodeStatus::kWaiting) {
    SendWaiting(job, node);
  } else if (static_cast<int>(job.members.size()) < job.max_nodes &&
             job.succeeded.empty()) {
    job.SetStatus(node, NodeStatus::kWaiting);
    node.join_seq = job.next_join_seq++;
    EndRound(job,
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
                : absl::StrCat(" is finishing: ", job.succeeded.size(), " of ",
                               job.members.size(), " nodes succeeded)"));
    job.SetStatus(node, NodeStatus::kWaiting);
    node.join_seq = job.next_join_seq++;
    SendWaitingToAll(job, &node);
  }
}

// Validate (no lock, nothing touched), admit (the job: new, rerun, or the
// running one, whose terms the node must share), register (the stream and the
// node), then dispatch (place the node by the job's state).
absl::Status Coordinator::Impl::OnJoin(ConnectionId conn, const v1::Join& join,
                                       std::shared_ptr<AgentChannel> channel) {
  absl::Duration lease;
  if (absl::Status s = ValidateJoin(join, channel, &lease); !s.ok()) return s;

  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  absl::StatusOr<Admission> admitted = AdmitJoin(conn, join, channel);
  if (!admitted.ok()) return admitted.status();
  if (admitted->answered) return absl::OkStatus();
  Job& job = *admitted->job;
  if (!admitted->fresh && AnswerExcludedJoin(job, join, channel, now)) {
    return absl::OkStatus();
  }

  RegisterStream(conn, join, std::move(channel), lease, now);
  Node& node = RegisterNode(job, conn, join);
  if (admitted->fresh) OpenFirstRound(job, join, admitted->created);
  DispatchJoin(job, node, conn, join);
  return absl::OkStatus();
}

}  // namespace muster::rendezvous
