// The Coordinator's state machine, in parts (coordinator_internal.h lists
// which file holds what). This file: the lookups and channel I/O the parts
// share, and the public methods, which run an event under the lock and write
// its messages after it is released.
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

#include <memory>
#include <utility>

#include "muster/common/logging.h"
#include "rendezvous/src/core/coordinator_internal.h"

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

// ---------- lookups and channel I/O

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
  liveness_.Touch(conn, clock_->Now());
}

void Coordinator::Impl::EraseConnection(
    absl::flat_hash_map<ConnectionId, Connection>::iterator it) {
  liveness_.Erase(it->first);
  leases_.Erase(it->first);
  progress_.Erase(it->first);
  speeds_.Erase(it->first);
  job_suggestion_.Erase(it->first);
  conns_.erase(it);
  UpdateHeartbeatSuggestion();
}

void Coordinator::Impl::UpdateHeartbeatSuggestion() {
  suggested_heartbeat_ms_.store(
      absl::ToInt64Milliseconds(rendezvous::SuggestedHeartbeatInterval(
          static_cast<int64_t>(conns_.size()),
          options_.heartbeat_budget_per_second)),
      std::memory_order_relaxed);
}

void Coordinator::Impl::Send(ConnectionId conn, v1::ServerMessage msg) {
  msg.set_epoch(epoch());
  Send(conn, std::make_shared<const v1::ServerMessage>(std::move(msg)));
}

void Coordinator::Impl::Send(ConnectionId conn,
                             std::shared_ptr<const v1::ServerMessage> msg) {
  auto c = conns_.find(conn);
  if (c == conns_.end() || c->second.closed) return;
  outbox_.Send(c->second.channel, std::move(msg));
}

void Coordinator::Impl::SendRoundReady(ConnectionId conn,
                                       v1::ServerMessage msg) {
  leases_.Visit(conn, [&msg](StreamLease& l) {
    l.in_round = true;
    msg.mutable_round_ready()->set_lease_seq(l.last_seq.Get());
    return true;
  });
  Send(conn, std::move(msg));
}

void Coordinator::Impl::DropNamespace(const std::string& prefix) {
  if (options_.on_round_end) options_.on_round_end(prefix);
}

// ---------- the one place a job's state changes

void Coordinator::Impl::Transition(Job& job, JobPhase to,
                                   absl::string_view why) {
  const JobPhase from = job.phase();
  if (!JobTransitionAllowed(from, to)) {
    MUSTER_LOG(ERROR) << "internal: job " << job.id << " went from "
                      << JobPhaseName(from) << " to " << JobPhaseName(to)
                      << " (" << why
                      << "), a transition its table does not have; please "
                         "report this";
  } else {
    MUSTER_LOG(DEBUG) << "job " << job.id << ": " << JobPhaseName(from)
                      << " -> " << JobPhaseName(to) << " (" << why << ")";
  }
  job.state = StateOf(to);
  job.adopting = to == JobPhase::kAdopting;
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
  if (status.ok()) impl_->CountJoin();
  return status;
}
bool Coordinator::OnHeartbeat(ConnectionId conn,
                              const v1::Heartbeat& heartbeat) {
  // The round it names is informational: any message proves liveness. A
  // heartbeat queues nothing (the adapter writes LeaseRenewed itself), so
  // there is nothing to flush.
  return impl_->OnHeartbeat(conn, heartbeat);
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
v1::GetStatusResponse Coordinator::StatusPage(
    const StatusPageQuery& query) const {
  return impl_->StatusPage(query);
}
absl::Duration Coordinator::SuggestedHeartbeatInterval() const {
  return absl::Milliseconds(impl_->SuggestedHeartbeatMs());
}
absl::Duration Coordinator::SuggestedHeartbeatInterval(
    ConnectionId conn) const {
  return absl::Milliseconds(impl_->SuggestedHeartbeatMsFor(conn));
}
int64_t Coordinator::ConnectedAgents() const {
  return impl_->ConnectedAgents();
}
int64_t Coordinator::JobCount() const { return impl_->JobCount(); }
int64_t Coordinator::JoinsAccepted() const { return impl_->JoinsAccepted(); }
int64_t Coordinator::RoundsReady() const { return impl_->RoundsReady(); }
void Coordinator::ResumeJob(const std::string& job_id, int64_t round,
                            int32_t restart_count) {
  impl_->ResumeJob(job_id, round, restart_count);
}

void Coordinator::DrainOutbox() { impl_->Drain(); }

void Coordinator::SetEpoch(int64_t epoch) { impl_->SetEpoch(epoch); }

void Coordinator::ForgiveSilence() { impl_->ForgiveSilence(); }

void Coordinator::Impl::ForgiveSilence() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const auto& [id, c] : conns_) {
    if (!c.closed) liveness_.Set(id, now);
  }
}

}  // namespace muster::rendezvous
