// Round formation: a round opens, gathers waiting nodes (Waiting updates,
// coalesced in large jobs), and closes into RUNNING with ranks assigned and a
// RoundReady for every member (coordinator_internal.h lists the other parts).
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "muster/rendezvous/rank_assignment.h"
#include "rendezvous/src/core/coordinator_internal.h"
#include "rendezvous/src/core/round_peers.h"

namespace muster::rendezvous {

std::shared_ptr<const v1::ServerMessage> Coordinator::Impl::WaitingMessage(
    const Job& job) const {
  auto msg = std::make_shared<v1::ServerMessage>();
  msg->set_epoch(epoch());
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
  w->set_heartbeat_interval_ms(SuggestedHeartbeatMs(job.max_nodes));
  return msg;
}

void Coordinator::Impl::SendWaiting(const Job& job, const Node& node) {
  Send(node.conn, WaitingMessage(job));
}

void Coordinator::Impl::SendWaitingToAll(Job& job, const Node* joiner,
                                         bool force) {
  const absl::Time now = clock_->Now();
  const absl::Duration interval =
      std::max(options_.waiting_update_interval,
               kWaitingUpdatePerAgent * job.WaitingCount());
  const absl::Time due = job.waiting_sent_at + interval;
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
    FillPeer(m, p);
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
  r->set_heartbeat_interval_ms(SuggestedHeartbeatMs(job.max_nodes));
  r->set_progress_watched(job.worker_timeout > absl::ZeroDuration());
  return msg;
}

// ---------- transitions

void Coordinator::Impl::OpenRound(Job& job) {
  Transition(job, JobPhase::kOpen, "a round opens");
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
  // --recovery=in-place: nodes that keep their workers come first (their
  // workers carry on, ranks compacted in their previous order); nodes that
  // start new workers are newcomers after them, even survivors.
  // Among the rest, a node that ran in an earlier round of the job and came
  // back (healthy: it passed its check and is not excluded) goes before a
  // fresh spare: its host is known to work with the others.
  bool in_place = false;
  std::vector<std::tuple<int, int, int, int64_t, std::string>> candidates;
  for (const auto& [id, node] : job.nodes) {
    if (node.status != NodeStatus::kWaiting) continue;
    auto it = previous_rank.find(id);
    const bool newcomer =
        node.join.recovery_in_place() && !node.join.has_kept();
    const bool returning = job.former_ids.contains(id) ||
                           job.former_hosts.contains(node.join.hostname());
    in_place = in_place || node.join.recovery_in_place();
    candidates.emplace_back(newcomer ? 1 : 0,
                            it == previous_rank.end()
                                ? std::numeric_limits<int>::max()
                                : it->second,
                            returning ? 0 : 1, node.join_seq, id);
  }
  std::sort(candidates.begin(), candidates.end());
  if (candidates.size() > static_cast<size_t>(job.max_nodes))
    candidates.resize(job.max_nodes);

  std::vector<MemberSpec> specs;
  std::vector<std::string> order;  // in-place: the candidates' order
  for (const auto& [newcomer, prev, returning, seq, id] : candidates) {
    order.push_back(id);
    const Node& node = job.nodes.at(id);
    specs.push_back(MemberSpec{.node_id = id,
                               .local_world_size = node.join.local_world_size(),
                               .node_rank_hint = node.join.node_rank_hint(),
                               .join_seq = node.join_seq});
  }
  absl::StatusOr<std::vector<RankAssignment>> ranks =
      AssignRanks(in_place ? order : job.previous_order, specs);
  if (!ranks.ok()) {
    FailJob(job, absl::StrCat("round ", job.round,
                              " cannot form: ", ranks.status().message()));
    return;
  }

  Transition(job, JobPhase::kRunning, "the round closes");
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
  bool kept = false;  // a survivor kept its workers: in-place recovery
  for (RankAssignment& r : *ranks) {
    Node& node = job.nodes.at(r.node_id);
    kept = kept || node.join.has_kept();
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
  rounds_ready_.fetch_add(1, std::memory_order_relaxed);
  v1::RoundRecord& record = job.history.emplace_back();
  record.set_round(job.round);
  record.set_ready_unix_ms(absl::ToUnixMillis(clock_->Now()));
  record.set_nodes(static_cast<int32_t>(job.members.size()));
  record.set_world_size(world_size);
  record.set_in_place(kept);
  if (job.history.size() > kMaxHistory) job.history.pop_front();
  for (size_t i = 0; i < job.members.size(); ++i) {
    SendRoundReady(job.nodes.at(job.members[i].rank.node_id).conn,
                   RoundReadyFor(job, static_cast<int>(i)));
  }
  SendWaitingToAll(job);  // the spares left over, if any
}

}  // namespace muster::rendezvous
