// Job lifecycle: success and the verdict every agent hears, retention and
// forgetting of ended jobs, and Tick, which fires the timers
// (coordinator_internal.h lists the other parts).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "rendezvous/src/core/coordinator_internal.h"

namespace muster::rendezvous {

namespace {

// Heartbeat deadlines are many and spread out: at 10,000 agents one falls due
// about every millisecond (and is re-armed further on, the agent being
// alive). Tick wakes for them on this grid instead, so it runs at most 20
// times a second for them, not once per deadline, and a lost agent is found
// at most this late (heartbeat timeouts are seconds).
constexpr absl::Duration kHeartbeatGrid = absl::Milliseconds(50);

// t rounded up to the next multiple of kHeartbeatGrid (since the epoch).
absl::Time OnHeartbeatGrid(absl::Time t) {
  if (t == absl::InfiniteFuture() || t == absl::InfinitePast()) return t;
  const int64_t grid = absl::ToInt64Nanoseconds(kHeartbeatGrid);
  const int64_t ns = absl::ToUnixNanos(t);
  int64_t rest = ns % grid;
  if (rest < 0) rest += grid;
  return rest == 0 ? t : absl::FromUnixNanos(ns - rest + grid);
}

}  // namespace

void Coordinator::Impl::SendFinalAndClose(Job& job,
                                          const v1::ServerMessage& msg) {
  job.verdict = msg;
  job.verdict->set_epoch(epoch());
  auto shared = std::make_shared<const v1::ServerMessage>(*job.verdict);
  for (const Member& m : job.members) job.verdict_nodes.insert(m.rank.node_id);
  for (auto& [id, node] : job.nodes) {
    job.verdict_nodes.insert(id);
    auto c = conns_.find(node.conn);
    if (c == conns_.end() || c->second.closed) continue;
    outbox_.Send(c->second.channel, shared);
    outbox_.Close(c->second.channel, absl::OkStatus());
    c->second.closed = true;
    leases_.Erase(node.conn);  // an ended stream renews nothing
    job.SetStatus(node, NodeStatus::kPending);
  }
}

// ---------- transitions

void Coordinator::Impl::SucceedJob(Job& job) {
  Transition(job, JobPhase::kSucceeded, "every member succeeded");
  EndHistory(job, "succeeded", "every member succeeded");
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": SUCCEEDED in round " << job.round << " ("
      << job.members.size() << " nodes, " << job.restart_count << " restarts)";
  v1::ServerMessage msg;
  msg.mutable_job_succeeded()->set_round(job.round);
  SendFinalAndClose(job, msg);
  DropNamespace(StorePrefix(job.id, job.round));
  MaybeStartRetention(job);
}

void Coordinator::Impl::MaybeStartRetention(Job& job) {
  if (job.ended() && job.nodes.empty() &&
      job.forget_at == absl::InfiniteFuture()) {
    job.forget_at = clock_->Now() + options_.finished_job_retention;
  }
}

// ---------- events

void Coordinator::Impl::OnWorkersSucceeded(
    ConnectionId conn, const v1::WorkersSucceeded& succeeded) {
  absl::MutexLock lock(&mu_);
  Touch(conn);
  auto [job, node] = CurrentMember(conn, succeeded.round(), "success report");
  if (job == nullptr) return;
  job->succeeded.insert(node->join.node_id());
  if (job->succeeded.size() == job->members.size()) SucceedJob(*job);
}

absl::Time Coordinator::Impl::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();

  // Missed heartbeats first: a node that is gone should not be counted into a
  // round that closes at this same instant.
  ExpireHeartbeats(now);

  // Round timers and retention.
  std::vector<std::string> forget;
  absl::Time progress_due = absl::InfiniteFuture();
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
    } else if (job.state == JobState::kRunning) {
      progress_due = std::min(progress_due, CheckProgress(job, now));
      // Not a deadline: the scores are read at musterd's tick pace.
      CheckStragglers(job, now);
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

  absl::Time next = OnHeartbeatGrid(
      heartbeats_.Next([this](ConnectionId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                           mu_) { return HeartbeatDeadline(id); }));
  for (const auto& [id, job] : jobs_) {
    next = std::min(next, job.waiting_flush_at);
    if (job.adopting) next = std::min(next, job.adopt_deadline);
    if (job.state == JobState::kOpen) {
      next = std::min({next, job.join_deadline, job.last_call_deadline});
    } else if (job.ended()) {
      next = std::min(next, job.forget_at);
    }
  }
  return std::min(next, progress_due);
}

void Coordinator::Impl::ResumeJob(const std::string& job_id, int64_t round,
                                  int32_t restart_count) {
  absl::MutexLock lock(&mu_);
  if (!job_id.empty() && !jobs_.contains(job_id))
    resumed_[job_id] = {std::max<int64_t>(round, 0),
                        std::max<int32_t>(restart_count, 0)};
}

}  // namespace muster::rendezvous
