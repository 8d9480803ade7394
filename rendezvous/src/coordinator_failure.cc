// Failure handling: what ends a round or the job early (a worker failure, a
// lost agent, a blocked preflight pair, missed heartbeats, Leave, a closed
// stream) and the root causes people read (coordinator_internal.h lists the
// other parts).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "muster/common/logging.h"
#include "rendezvous/src/coordinator_internal.h"

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
  job.EraseNode(it);
  job.awaited_survivors.erase(node_id);

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

// ---------- events

// No lock of ours: a heartbeat only moves its connection's time in liveness_,
// so it never waits for a round forming or a Tick (liveness_table.h).
void Coordinator::Impl::OnHeartbeat(ConnectionId conn) { Touch(conn); }

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
    std::string detail =
        absl::StrCat("musterd heard nothing from ",
                     DescribeNode(node->join.hostname(), node->join.node_id()),
                     " for ", timeout, " (heartbeat_timeout)");
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

void Coordinator::Impl::OnLeave(ConnectionId conn, const v1::Leave& leave) {
  absl::MutexLock lock(&mu_);
  auto [job, node] = Find(conn);
  if (job == nullptr || node == nullptr) {
    if (auto c = conns_.find(conn); c != conns_.end()) EraseConnection(c);
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
    if (auto c = conns_.find(conn); c != conns_.end()) EraseConnection(c);
    return;
  }
  const std::string node_id = node->join.node_id();
  LoseNode(*job, node_id, "stream closed", std::nullopt);
}

}  // namespace muster::rendezvous
