// Failure handling: what ends a round or the job early (a worker failure, a
// lost agent, a blocked preflight pair, missed heartbeats, Leave, a closed
// stream) and the root causes people read (coordinator_internal.h lists the
// other parts).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "muster/common/logging.h"
#include "rendezvous/src/core/coordinator_internal.h"

namespace muster::rendezvous {

namespace {

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

}  // namespace

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

// ---------- transitions

void Coordinator::Impl::EndHistory(Job& job, absl::string_view ended_by,
                                   absl::string_view reason) {
  if (job.history.empty()) return;
  v1::RoundRecord& last = job.history.back();
  if (last.round() != job.round || last.ended_unix_ms() != 0) return;
  last.set_ended_unix_ms(absl::ToUnixMillis(clock_->Now()));
  last.set_ended_by(std::string(ended_by));
  last.set_reason(std::string(reason));
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
  EndHistory(job, worker_failure ? "worker failure" : "membership change",
             reason);
  MUSTER_LOG_AT(options_.event_log_level)
      << "job " << job.id << ": " << reason << "; restarting round "
      << job.round
      << (worker_failure
              ? absl::StrCat(" (restart ", job.restart_count, " of ",
                             job.max_restarts, ")")
              : std::string(" (membership change, no restart used)"));
  auto msg = std::make_shared<v1::ServerMessage>();
  msg->set_epoch(epoch());
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
    // Its workers stop: no renewals until its next round (lease.h).
    leases_.Visit(node.conn, [](StreamLease& l) {
      l.in_round = false;
      return true;
    });
    // It must stop its workers and Join again.
    job.SetStatus(node, NodeStatus::kPending);
    job.awaited_survivors.insert(id);
  }
  DropNamespace(StorePrefix(job.id, job.round));
  OpenRound(job);
}

void Coordinator::Impl::FailJob(Job& job, const std::string& cause) {
  const bool was_running = job.state == JobState::kRunning;
  // A straggler of the failed round is worth knowing at 3 a.m.: a slow rank
  // often comes before a timeout.
  const std::string root_cause = absl::StrCat(cause, StragglerNote(job));
  Transition(job, JobPhase::kFailed, "the job failed");
  job.root_cause = root_cause;
  job.last_failure = root_cause;
  EndHistory(job, "failed", root_cause);
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
    EraseConnection(c);
  }
  if (status == NodeStatus::kMember || status == NodeStatus::kPending) {
    // It ran in a round of this job: if it comes back healthy, it goes before
    // a fresh spare (CloseRound).
    if (job.former_ids.size() < kMaxFormerNodes) job.former_ids.insert(node_id);
    if (job.former_hosts.size() < kMaxFormerNodes) {
      job.former_hosts.insert(it->second.join.hostname());
    }
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

// ---------- re-adoption after a musterd restart

bool Coordinator::Impl::AdoptableClaim(const v1::Join& join) {
  if (!join.has_claim()) return false;
  const v1::RoundReady& r = join.claim().round();
  return (join.claim().workers_running() || join.claim().reported()) &&
         r.round() > 0 && r.group_world_size() > 0 && r.group_rank() >= 0 &&
         r.group_rank() < r.group_world_size() &&
         r.store_prefix() == StorePrefix(join.job_id(), r.round());
}

void Coordinator::Impl::StartAdoption(Job& job, const v1::Join& join) {
  Transition(job, JobPhase::kAdopting, "a Join claims a running round");
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
  Transition(job, JobPhase::kRunning, "every member of the round is back");
  job.adopt_deadline = absl::InfiniteFuture();
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
    SendRoundReady(job.nodes.at(job.members[i].rank.node_id).conn,
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
  // ADOPTING -> OPEN: OpenRound below makes the transition.
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
  // No restart comes back unused: the journal's count is the floor.
  job.restart_count = std::max(job.restart_count, job.resumed_restart_count);
  // As after any lost member: the claimers that are back re-form at once
  // (with min_nodes), without last call.
  job.reforming = true;
  job.awaited_survivors.clear();
  DropNamespace(StorePrefix(job.id, job.round));
  OpenRound(job);
}

// ---------- events

// No lock of ours: a heartbeat moves its time in liveness_ (and its lease),
// so it never waits for a round forming or a Tick (liveness_table.h).
bool Coordinator::Impl::OnHeartbeat(ConnectionId conn,
                                    const v1::Heartbeat& heartbeat) {
  Touch(conn);
  // The progress watch: only for a stream still registered (an entry for one
  // already erased would stay behind).
  if (heartbeat.has_progress_age_ms() && liveness_.Get(conn).has_value()) {
    progress_.Set(conn, ProgressMark{
                            .round = heartbeat.round(),
                            .silence = absl::Milliseconds(std::max<int64_t>(
                                0, heartbeat.progress_age_ms())),
                        });
  }
  if (heartbeat.speeds_size() > 0 && liveness_.Get(conn).has_value()) {
    speeds_.Set(conn, SpeedMark{.round = heartbeat.round(),
                                .samples = {heartbeat.speeds().begin(),
                                            heartbeat.speeds().end()},
                                .at = clock_->Now()});
  }
  const int64_t seq = heartbeat.seq();
  // An agent that sent no seq (an older one, a load generator) gets no
  // LeaseRenewed: it would not read it, and each one is a write.
  if (seq == 0) return false;
  // Lease fencing: renew about every lease/4 while the node is counted alive
  // and runs workers (StreamLease::OnHeartbeat).
  const absl::Time now = clock_->Now();
  return leases_
      .Visit(conn, [&](StreamLease& l) { return l.OnHeartbeat(seq, now); })
      .value_or(false);
}

std::optional<absl::Time> Coordinator::Impl::HeartbeatDeadline(
    ConnectionId id) const {
  auto c = conns_.find(id);
  if (c == conns_.end()) return std::nullopt;
  const std::optional<absl::Time> last_seen = liveness_.Get(id);
  if (!last_seen.has_value()) return std::nullopt;
  return *last_seen + c->second.heartbeat_timeout;
}

void Coordinator::Impl::ExpireHeartbeats(absl::Time now) {
  // From the deadline queue: only connections whose deadline came due are
  // looked at, not every connection on every tick.
  std::vector<ConnectionId> expired;
  heartbeats_.PopExpired(
      now,
      [this](ConnectionId id)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return HeartbeatDeadline(id); },
      &expired);
  std::sort(expired.begin(), expired.end());  // deterministic order of losses
  for (ConnectionId id : expired) {
    auto c = conns_.find(id);
    if (c == conns_.end()) continue;  // removed by an earlier loss in this loop
    auto [job, node] = Find(id);
    if (job == nullptr || node == nullptr) {
      EraseConnection(c);
      continue;
    }
    const std::string timeout = FormatSeconds(c->second.heartbeat_timeout);
    std::string why = absl::StrCat("no heartbeat for ", timeout);
    std::string detail = absl::StrCat(
        "musterd heard nothing from ",
        DescribeNode(node->join.hostname(), node->join.node_id()), " for ",
        timeout, " (heartbeat_timeout, or the lease when longer)");
    if (c->second.heartbeat_interval_ms > 0) {
      // The interval the agent used: its own, or what it made of the heartbeat
      // budget's suggestion (an agent that follows it).
      const int64_t interval_ms =
          absl::ToInt64Milliseconds(FollowedHeartbeatInterval(
              absl::Milliseconds(c->second.heartbeat_interval_ms),
              c->second.lease,
              absl::Milliseconds(SuggestedHeartbeatMsFor(id))));
      const int64_t missed =
          absl::ToInt64Milliseconds(c->second.heartbeat_timeout) / interval_ms;
      absl::StrAppend(&why, ", ", missed, " heartbeats missed");
      absl::StrAppend(&detail, ": ", missed,
                      " heartbeats missed at an interval of ", interval_ms,
                      "ms");
    } else {
      absl::StrAppend(&detail, ": heartbeats missed");
    }
    absl::StrAppend(&detail, "; the node is treated as lost");
    const std::string node_id = node->join.node_id();
    LoseNode(*job, node_id, why, absl::UnavailableError(detail));
  }
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
  const std::string node_id = node->join.node_id();
  const bool exclude = CountFailedRound(*job, node_id);
  EndRound(*job, reason, /*worker_failure=*/true);
  if (exclude && !job->ended()) {
    ExcludeNode(
        *job, node_id,
        absl::StrCat("its workers failed ", job->failed_in_a_row[node_id],
                     " rounds in a row (the last: ", reason, ")"),
        0, clock_->Now(),
        absl::StrCat("--exclude-after-failures=", job->exclude_after_failures));
  }
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

void Coordinator::Impl::OnLeave(ConnectionId conn, const v1::Leave& leave) {
  if (leave.health_check_failed()) {
    // A node whose check failed between rounds stays out of the job for the
    // cooldown: one passing check later does not make a flapping GPU sound.
    absl::MutexLock lock(&mu_);
    auto [job, node] = Find(conn);
    if (job != nullptr && node != nullptr && !job->ended()) {
      RecordExclusion(*job, *node,
                      leave.reason().empty()
                          ? std::string("health check failed")
                          : leave.reason(),
                      0, clock_->Now(), "--health-check");
    }
  }
  StreamEnded(conn,
              leave.reason().empty() ? std::string("left")
                                     : absl::StrCat("left: ", leave.reason()),
              absl::OkStatus());
}

void Coordinator::Impl::OnDisconnect(ConnectionId conn) {
  StreamEnded(conn, "stream closed", std::nullopt);
}

void Coordinator::Impl::StreamEnded(ConnectionId conn, const std::string& why,
                                    std::optional<absl::Status> close_with) {
  absl::MutexLock lock(&mu_);
  auto [job, node] = Find(conn);
  if (job == nullptr || node == nullptr) {
    if (auto c = conns_.find(conn); c != conns_.end()) EraseConnection(c);
    return;
  }
  const std::string node_id = node->join.node_id();
  LoseNode(*job, node_id, why, std::move(close_with));
}

}  // namespace muster::rendezvous
